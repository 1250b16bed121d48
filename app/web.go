package app

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/presenced/presenced/booking"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/web/pages"
)

// demoPages are the demo pages and the parts whose APIs each page calls
// first: a process mounts a page when it runs one of them, so the plane
// that serves a page's data serves the page (in a split deployment the
// page's other calls go where the ingress routes them). The index at /,
// /js/ and /css/ are on every process.
var demoPages = []struct {
	page  pages.Page
	parts []string
}{
	{pages.Hotels, names("booking.search", "viewers.count")},
	{pages.Presence, names("presence.gateway")},
	{pages.Sale, names("waitingroom.admit")},
	{pages.Ops, names("waitingroom.admit")},
}

// demoEvent is the event `presenced demo` seeds, which the index links to.
const demoEvent = "demo-arena"

// demoTokenTTL is how long a demo sign-in lasts.
const demoTokenTTL = 12 * time.Hour

// mountPages serves the index, the browser client and the demo pages of
// the parts this process started.
func (a *App) mountPages() error {
	site := pages.Site{
		Roles:          a.roleInfo(),
		ManualStatuses: a.Config.Presence.ManualStatuses,
		DemoEvent:      demoEvent,
	}
	if a.demoPagesOn() {
		for _, dp := range demoPages {
			if slices.ContainsFunc(dp.parts, func(p string) bool { return slices.Contains(a.started, p) }) {
				site.Pages = append(site.Pages, dp.page)
			}
		}
	}
	if slices.Contains(a.started, "booking.search") {
		site.Hotel = a.pageHotel
	}
	if a.devTokens {
		secret, cfg := a.Config.Auth.JWTSecret, a.Config.Auth
		site.SignIn = func(user string) (string, time.Time, error) {
			exp := time.Now().Add(demoTokenTTL)
			tok, err := auth.SignDev(secret, user, demoTokenTTL, nil, cfg.Issuer, cfg.Audience)
			return tok, exp, err
		}
	}
	return pages.Mount(a.Server.Echo, site)
}

// pageHotel reads a hotel for its demo page from booking's search.
func (a *App) pageHotel(ctx context.Context, id string) (*pages.Hotel, error) {
	b, err := a.Booking()
	if err != nil {
		return nil, err
	}
	card, err := b.Hotel(ctx, id)
	if errors.Is(err, booking.ErrHotelNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	h := &pages.Hotel{Name: card.Name, City: card.City, Currency: card.Currency}
	for _, rt := range card.RoomTypes {
		h.RoomTypes = append(h.RoomTypes, pages.RoomType{ID: rt.ID, Name: rt.Name, Capacity: rt.Capacity, BasePrice: rt.BasePrice})
	}
	return h, nil
}

func (a *App) demoPagesOn() bool {
	switch a.Config.Web.DemoPages {
	case "on":
		return true
	case "off":
		return false
	}
	return a.Config.Auth.DevSecrets
}

// roleInfo describes this process's roles for the index: each role's
// parts that started, with the routes each mounted.
func (a *App) roleInfo() []pages.Role {
	var out []pages.Role
	for _, r := range roles {
		if !slices.Contains(a.roles, r.name) {
			continue
		}
		pr := pages.Role{Name: r.name, Holds: r.holds}
		var resolved []string
		for _, p := range r.parts {
			resolved = withAfter(resolved, p)
		}
		for _, p := range resolved {
			if slices.Contains(a.started, p) {
				pr.Parts = append(pr.Parts, pages.Part{Name: p, Routes: a.partRoutes[p]})
			}
		}
		out = append(out, pr)
	}
	return out
}

// routeKeys lists the routes of e as "METHOD /path".
func routeKeys(e *echo.Echo) map[string]bool {
	out := map[string]bool{}
	for _, r := range e.Routes() {
		// Groups with middleware add catch-all "echo_route_not_found"
		// entries: not routes anyone can call.
		if strings.HasPrefix(r.Method, "echo_") {
			continue
		}
		out[r.Method+" "+r.Path] = true
	}
	return out
}

// newRoutes are the routes of e not in before, sorted by path.
func newRoutes(e *echo.Echo, before map[string]bool) []string {
	var out []string
	for k := range routeKeys(e) {
		if !before[k] {
			out = append(out, k)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return pathOf(out[i]) < pathOf(out[j]) || pathOf(out[i]) == pathOf(out[j]) && out[i] < out[j]
	})
	return out
}

func pathOf(route string) string {
	for i := range route {
		if route[i] == ' ' {
			return route[i+1:]
		}
	}
	return route
}
