// Package pages is what a person sees: the index at / (what this process
// serves), the browser client /js/presenced.js, and the demo pages under
// /demo/. Everything is embedded in the binary (no build step, no CDN);
// pages are plain HTML rendered with html/template, their scripts ES
// modules importing presenced.js. The app decides which pages a process
// mounts, by the parts it runs (app/web.go).
package pages

import (
	"context"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

//go:embed assets templates
var files embed.FS

// Page names a demo page.
type Page string

// The demo pages.
const (
	// Hotels is /demo/hotels (search) and /demo/hotels/{id} (a hotel with
	// its live viewer count).
	Hotels Page = "hotels"
	// Presence is /demo/presence: contacts with status dots.
	Presence Page = "presence"
	// Sale is /demo/sale/{event}: the fan's journey from queue to ticket,
	// with the sandbox's checkout page /demo/checkout.
	Sale Page = "sale"
	// Ops is /demo/ops: the line, holds and sockets, and the admission dial.
	Ops Page = "ops"
)

// Site is what a process tells its pages.
type Site struct {
	// Roles are this process's roles with their parts and routes.
	Roles []Role
	// Pages are the demo pages mounted here.
	Pages []Page
	// SignIn mints a development user token for the demo sign-in; nil
	// when the process verifies tokens of a real issuer (no sign-in).
	SignIn func(user string) (token string, expires time.Time, err error)
	// ManualStatuses are the presence statuses a user may pick.
	ManualStatuses []string
	// DemoEvent is the event the index links the sale page to.
	DemoEvent string
	// Hotel reads a hotel for its page (nil, nil: no such hotel); nil when
	// this process does not run the hotel search, and the page then knows
	// only what its query string says.
	Hotel func(ctx context.Context, id string) (*Hotel, error)
}

// Hotel is what a hotel's page shows before any dates are chosen.
type Hotel struct {
	Name      string     `json:"name"`
	City      string     `json:"city"`
	Currency  string     `json:"currency"`
	RoomTypes []RoomType `json:"roomTypes"`
}

// RoomType is one room type of a Hotel.
type RoomType struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Capacity  int    `json:"capacity"`
	BasePrice int64  `json:"basePrice"` // minor units a night, before rates
}

// Role is one role of the process, for the index.
type Role struct {
	Name  string
	Holds string
	Parts []Part
}

// Part is one started part and the routes it mounted.
type Part struct {
	Name   string
	Routes []string // "GET /v1/hotels", sorted
}

// getOrHead: every page and asset answers HEAD as its GET would, without
// the body (net/http drops it).
var getOrHead = []string{http.MethodGet, http.MethodHead}

// Mount serves the index, the assets and the demo pages of s on e.
func Mount(e *echo.Echo, s Site) error {
	// Assets change with the binary: revalidate rather than cache.
	noCache := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			c.Response().Header().Set(echo.HeaderCacheControl, "no-cache")
			return next(c)
		}
	}
	for _, dir := range []string{"js", "css"} {
		sub, err := fs.Sub(files, "assets/"+dir)
		if err != nil {
			return fmt.Errorf("pages: %w", err)
		}
		// HEAD too: probes and caches ask for headers only. The middleware
		// is the route's, not a group's: a group's catch-all would answer
		// a POST 404 instead of 405.
		e.Match(getOrHead, "/"+dir+"/*", echo.StaticDirectoryHandler(sub, !e.EnablePathUnescapingStaticFiles), noCache)
	}

	r, err := newRenderer(s)
	if err != nil {
		return err
	}
	e.Match(getOrHead, "/", r.index)
	for _, p := range s.Pages {
		switch p {
		case Hotels:
			e.Match(getOrHead, "/demo/hotels", r.page("hotels", "Hotels", nil))
			e.Match(getOrHead, "/demo/hotels/:hotel", r.hotel)
		case Presence:
			e.Match(getOrHead, "/demo/presence", r.page("presence", "Presence", nil))
		case Sale:
			e.Match(getOrHead, "/demo/sale/:event", r.page("sale", "Sale", func(c echo.Context) (map[string]any, error) {
				return map[string]any{"event": c.Param("event")}, validID(c.Param("event"))
			}))
			e.Match(getOrHead, "/demo/checkout", r.page("checkout", "Checkout", nil))
		case Ops:
			e.Match(getOrHead, "/demo/ops", r.page("ops", "Operations", nil))
		}
	}
	if s.SignIn != nil && len(s.Pages) > 0 {
		e.POST("/demo/token", signIn(s.SignIn))
	}
	return nil
}

// validID accepts the ids of hotels and events (1–64 of A-Z a-z 0-9 . _ -):
// anything else would only produce a page whose every call fails.
func validID(id string) error {
	ok := len(id) >= 1 && len(id) <= 64
	for _, r := range id {
		ok = ok && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
	}
	if !ok {
		return echo.NewHTTPError(http.StatusNotFound, "no such page: ids are 1–64 letters, digits, '.', '_' or '-'")
	}
	return nil
}

// renderer holds one template set per page: each page defines "main"
// inside the shared layout.
type renderer struct {
	site Site
	tmpl map[string]*template.Template
}

func newRenderer(s Site) (*renderer, error) {
	r := &renderer{site: s, tmpl: map[string]*template.Template{}}
	for _, name := range []string{"index", "hotels", "hotel", "presence", "sale", "checkout", "ops"} {
		t, err := template.New("layout.html").Funcs(template.FuncMap{"breakable": breakable}).
			ParseFS(files, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("pages: template %s: %w", name, err)
		}
		r.tmpl[name] = t
	}
	return r, nil
}

// breakable lets a narrow screen wrap an identifier (a route, a part's
// name) after its slashes and dots, never inside a word.
func breakable(s string) template.HTML {
	e := template.HTMLEscapeString(s)
	e = strings.ReplaceAll(e, "/", "/<wbr>")
	e = strings.ReplaceAll(e, ".", ".<wbr>")
	return template.HTML(e) // escaped above; only <wbr> added
}

// view is what every template gets.
type view struct {
	Title string
	Page  string
	Nav   []navLink
	// Config is handed to the page's script as JSON.
	Config map[string]any
	Site   Site
}

type navLink struct {
	Href, Label string
	Current     bool
}

func (r *renderer) nav(current string) []navLink {
	links := []navLink{{Href: "/", Label: "Home", Current: current == "index"}}
	for _, p := range r.site.Pages {
		switch p {
		case Hotels:
			links = append(links, navLink{"/demo/hotels", "Hotels", current == "hotels" || current == "hotel"})
		case Presence:
			links = append(links, navLink{"/demo/presence", "Presence", current == "presence"})
		case Sale:
			links = append(links, navLink{"/demo/sale/" + r.site.DemoEvent, "Sale", current == "sale" || current == "checkout"})
		case Ops:
			links = append(links, navLink{"/demo/ops", "Ops", current == "ops"})
		}
	}
	return links
}

func (r *renderer) render(c echo.Context, name, title string, cfg map[string]any) error {
	if cfg == nil {
		cfg = map[string]any{}
	}
	cfg["signIn"] = r.site.SignIn != nil
	cfg["manualStatuses"] = r.site.ManualStatuses
	cfg["demoEvent"] = r.site.DemoEvent
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
	h.Set(echo.HeaderCacheControl, "no-cache")
	// Scripts, styles and sockets only from here: the pages use no CDN.
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' blob: data:; style-src 'self'; script-src 'self'; connect-src "+connectSrc(c.Request().Host)+"; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	c.Response().WriteHeader(http.StatusOK)
	return r.tmpl[name].Execute(c.Response(), view{Title: title, Page: name, Nav: r.nav(name), Config: cfg, Site: r.site})
}

// connectSrc allows this origin's sockets: 'self' covers ws(s) only in
// newer browsers, so the host is named too when it is a plain host[:port].
func connectSrc(host string) string {
	if !hostPattern.MatchString(host) {
		return "'self'"
	}
	return "'self' ws://" + host + " wss://" + host
}

var hostPattern = regexp.MustCompile(`^[A-Za-z0-9.-]+(:[0-9]{1,5})?$|^\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?$`)

func (r *renderer) index(c echo.Context) error { return r.render(c, "index", "presenced", nil) }

// hotel renders a hotel's page titled with the hotel's name, not its id,
// with what the page needs to book before any search: its city (the
// search's key), currency and room types. Without the search in this
// process, or when it fails, the page is titled with the id and books from
// its query string.
func (r *renderer) hotel(c echo.Context) error {
	id := c.Param("hotel")
	if err := validID(id); err != nil {
		return err
	}
	cfg := map[string]any{"hotel": id, "hotelName": id}
	if r.site.Hotel != nil {
		ctx, cancel := context.WithTimeout(c.Request().Context(), 3*time.Second)
		defer cancel()
		// A failed read leaves the page as it would be without the search.
		h, err := r.site.Hotel(ctx, id)
		switch {
		case err != nil:
		case h == nil:
			return echo.NewHTTPError(http.StatusNotFound, "no such hotel")
		default:
			cfg["hotelName"], cfg["hotelInfo"] = h.Name, h
		}
	}
	return r.render(c, "hotel", cfg["hotelName"].(string), cfg)
}

func (r *renderer) page(name, title string, cfg func(echo.Context) (map[string]any, error)) echo.HandlerFunc {
	return func(c echo.Context) error {
		var m map[string]any
		if cfg != nil {
			var err error
			if m, err = cfg(c); err != nil {
				return err
			}
		}
		return r.render(c, name, title, m)
	}
}
