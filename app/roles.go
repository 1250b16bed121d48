package app

import (
	"fmt"
	"slices"
	"strings"
)

// A role is a plane of the deployment, chosen by what it holds scarce. Each
// role starts module parts; several roles may share a part, which then
// starts once. Adding a role, or a part to a role, is one edit in this file.
type role struct {
	name  string
	holds string
	parts []string
}

// roles is the role table of SPEC §2. "all" is every part.
var roles = []role{
	{"ingest", "sockets, CPU", []string{"viewers.heartbeat"}},
	{"count", "sockets", []string{"viewers.count", "viewers.push"}},
	{"presence", "long-lived sockets", []string{"presence.gateway", "presence.read"}},
	{"admit", "many idle sockets, no DB credentials", []string{"waitingroom.admit"}},
	{"browse", "read bursts, read-only DB login", []string{"booking.seatmap", "booking.live"}},
	{"booking", "DB connections and row locks", []string{"booking.holds", "payments.api", "payments.webhooks"}},
	{"worker", "background loops", []string{
		"waitingroom.ticker", "booking.expiry", "outbox.relay", "payments.fulfillment",
		"payments.refunds", "presence.lifecycle", "viewers.controller", "viewers.abuse",
	}},
}

// A part is one piece of a module: routes, background loops, or both.
type part struct {
	// needs lists the stores the part uses, so a process connects only to
	// what its roles need and /readyz checks exactly those.
	needs []dependency
	// start builds the part on the app; nil means the module is not built
	// yet and the part starts nothing.
	start func(*App) error
}

type dependency string

const (
	needRedis    dependency = "redis"
	needPostgres dependency = "postgres"
	needReadOnly dependency = "postgres-readonly"
	needWebhook  dependency = "postgres-webhook"
)

// parts maps each part named in the role table to what it needs and starts.
// A part's needs hold even before it is built: they are the contract of its
// plane (the admit plane never holds database credentials).
var parts = map[string]part{
	"viewers.heartbeat":    {needs: deps(needRedis, needPostgres), start: startViewersHeartbeat},
	"viewers.count":        {needs: deps(needRedis, needPostgres), start: startViewersCount},
	"viewers.push":         {needs: deps(needRedis, needPostgres), start: startViewersPush},
	"viewers.controller":   {needs: deps(needRedis, needPostgres), start: startViewersController},
	"viewers.abuse":        {needs: deps(needRedis, needPostgres), start: startViewersAbuse},
	"presence.gateway":     {needs: deps(needRedis, needPostgres), start: startPresenceGateway},
	"presence.read":        {needs: deps(needRedis, needPostgres), start: startPresenceRead},
	"presence.lifecycle":   {needs: deps(needRedis), start: startPresenceLifecycle},
	"waitingroom.admit":    {needs: deps(needRedis), start: startWaitingroomAdmit},
	"waitingroom.ticker":   {needs: deps(needRedis), start: startWaitingroomTicker},
	"booking.seatmap":      {needs: deps(needRedis, needReadOnly), start: startBookingSeatMap},
	"booking.live":         {needs: deps(needRedis, needReadOnly), start: startBookingLive},
	"booking.holds":        {needs: deps(needRedis, needPostgres), start: startBookingHolds},
	"booking.expiry":       {needs: deps(needRedis, needPostgres), start: startBookingExpiry},
	"outbox.relay":         {needs: deps(needRedis, needPostgres), start: startOutboxRelay},
	"payments.api":         {needs: deps(needPostgres)},
	"payments.webhooks":    {needs: deps(needWebhook)},
	"payments.fulfillment": {needs: deps(needRedis, needPostgres)},
	"payments.refunds":     {needs: deps(needPostgres)},
}

func deps(d ...dependency) []dependency { return d }

// RoleNames lists the valid roles, "all" last.
func RoleNames() []string {
	names := make([]string, 0, len(roles)+1)
	for _, r := range roles {
		names = append(names, r.name)
	}
	return append(names, "all")
}

// ResolveRoles validates a role list (names may be comma separated) and
// returns the roles and the parts they start, in table order, each once.
func ResolveRoles(list []string) (roleNames, partNames []string, err error) {
	var want []string
	for _, item := range list {
		for _, r := range strings.Split(item, ",") {
			if r = strings.TrimSpace(strings.ToLower(r)); r != "" {
				want = append(want, r)
			}
		}
	}
	if len(want) == 0 {
		return nil, nil, fmt.Errorf("no role given: valid roles are %s", strings.Join(RoleNames(), ", "))
	}
	for _, w := range want {
		if w != "all" && !slices.ContainsFunc(roles, func(r role) bool { return r.name == w }) {
			return nil, nil, fmt.Errorf("unknown role %q: valid roles are %s", w, strings.Join(RoleNames(), ", "))
		}
	}
	all := slices.Contains(want, "all")
	for _, r := range roles {
		if !all && !slices.Contains(want, r.name) {
			continue
		}
		roleNames = append(roleNames, r.name)
		for _, p := range r.parts {
			if !slices.Contains(partNames, p) {
				partNames = append(partNames, p)
			}
		}
	}
	return roleNames, partNames, nil
}

// RoleInfo describes a role for `presenced roles`.
type RoleInfo struct {
	Name  string
	Holds string
	Parts []PartInfo
}

// PartInfo describes one part of a role.
type PartInfo struct {
	Name  string
	Built bool
	Needs []string
}

// Roles describes the role table.
func Roles() []RoleInfo {
	var out []RoleInfo
	for _, r := range roles {
		info := RoleInfo{Name: r.name, Holds: r.holds}
		for _, name := range r.parts {
			p := parts[name]
			pi := PartInfo{Name: name, Built: p.start != nil}
			for _, n := range p.needs {
				pi.Needs = append(pi.Needs, string(n))
			}
			info.Parts = append(info.Parts, pi)
		}
		out = append(out, info)
	}
	return out
}
