package app

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/presenced/presenced/booking"
	"github.com/presenced/presenced/internal/module"
	"github.com/presenced/presenced/payments"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/viewers"
	"github.com/presenced/presenced/waitingroom"
)

// A role is a plane of the deployment, chosen by what it holds scarce. Each
// role starts module parts; several roles may share a part, which then
// starts once. This file is the one source of the planes: what each starts,
// the stores it connects to and the secrets it must be given.
// `presenced roles --json` prints it, and the tests of the Helm chart
// (deploy/helm), the split cluster (internal/cluster), docker-compose.yml
// and docs/operations.md hold each to it.
type role struct {
	name  string
	holds string
	parts []string
}

// roles is the role table: the planes of a deployment. "all" is every part.
var roles = []role{
	{"ingest", "sockets, CPU", []string{"viewers.heartbeat"}},
	{"count", "sockets", []string{"viewers.count", "viewers.push"}},
	{"presence", "long-lived sockets", []string{"presence.gateway", "presence.read"}},
	{"admit", "many idle sockets, no DB credentials", []string{"waitingroom.admit"}},
	{"browse", "read bursts, read-only DB login", []string{"booking.seatmap", "booking.live", "booking.search"}},
	{"booking", "DB connections and row locks", []string{"booking.holds", "booking.stays", "payments.api", "payments.webhooks"}},
	{"worker", "background loops", []string{
		"waitingroom.ticker", "booking.expiry", "outbox.relay", "payments.fulfillment",
		"payments.refunds", "presence.lifecycle", "viewers.controller", "viewers.abuse",
	}},
}

// A part is one piece of a module: routes, background loops, or both.
type part struct {
	// needs lists the stores the part uses: a process connects only to what
	// its parts need, /readyz checks exactly those, and a part asking its
	// host for any other store gets module.ErrUndeclared. A part not built
	// yet declares nothing.
	needs []dependency
	// after names parts started first in the same process: pieces several
	// parts share, which no role names itself.
	after []string
	// secrets lists the secret groups the part must be given beyond those
	// of every process (everyProcess).
	secrets []string
	// start builds the part; nil means the module is not built yet.
	start startFunc
}

type startFunc func(ctx context.Context, a *App, h module.Host) error

type dependency string

const (
	needRedis    dependency = "redis"
	needPostgres dependency = "postgres"
	needReadOnly dependency = "postgres-readonly"
	// needWebhook is the payment webhooks' own pool: a hold stampede can
	// never take the connections of a paying customer's webhook.
	needWebhook dependency = "postgres-webhook"
	// needLimits is the Redis of limits shared between processes: its own
	// server when configured, else the main one (module.Host.LimitRedis).
	needLimits dependency = "redis-limits"
)

// Secret groups: settings whoever deploys a process must give it (they are
// generated only in development). A deployment gives a plane exactly the
// groups of its roles' parts. The names are the Helm chart's.
const (
	secretAuth        = "auth"        // every process: user tokens and the API key
	secretPassSigning = "passSigning" // signs admission passes
	secretPassVerify  = "passVerify"  // checks admission passes (public keys)
	secretCookie      = "cookie"      // signs and checks viewer session cookies
	secretPayments    = "payments"    // ticket, manifest and provider keys
)

// everyProcess are the secret groups every process needs.
var everyProcess = []string{secretAuth}

// settingsOf names the settings (config keys) that carry each store and
// secret group.
var settingsOf = map[string][]string{
	string(needRedis):    {"redis.url"},
	string(needPostgres): {"postgres.url"},
	string(needReadOnly): {"postgres.readonly_url"},
	string(needWebhook):  {"postgres.webhook_url"},
	string(needLimits):   {"viewers.ratelimit_redis_url"},
	secretAuth:           {"auth.api_key", "auth.jwt_secret"},
	secretPassSigning:    {"waitingroom.signing_key"},
	secretPassVerify:     {"waitingroom.verify_keys"},
	secretCookie:         {"viewers.cookie_signing_key", "viewers.cookie_verify_keys"},
	secretPayments:       {"payments.ticket_key", "payments.manifest_key", "payments.stripe.secret_key", "payments.stripe.webhook_secrets"},
}

// optionalSettings may be left out where their group is given: a JWKS URL
// instead of a JWT secret, cookies checked only with the signing key, the
// webhooks on the main pool, and no Stripe account (the sandbox or another
// provider).
var optionalSettings = []string{"auth.jwt_secret", "viewers.cookie_verify_keys", "postgres.webhook_url", "viewers.ratelimit_redis_url",
	"payments.stripe.secret_key", "payments.stripe.webhook_secrets"}

// parts maps each part to what it needs and starts.
var parts = map[string]part{
	"viewers.tiers":      {needs: deps(needRedis, needPostgres), start: viewersPart((*viewers.Module).StartTiers)},
	"viewers.hotels":     {needs: deps(needPostgres), after: names("booking.directory"), start: viewersPart((*viewers.Module).StartHotels)},
	"viewers.heartbeat":  {needs: deps(needRedis, needPostgres, needLimits), secrets: names(secretCookie), after: names("viewers.tiers", "viewers.hotels"), start: viewersPart((*viewers.Module).StartHeartbeat)},
	"viewers.count":      {needs: deps(needRedis, needPostgres), after: names("viewers.tiers", "viewers.hotels"), start: viewersPart((*viewers.Module).StartCount)},
	"viewers.push":       {needs: deps(needRedis, needPostgres), after: names("viewers.tiers", "viewers.hotels"), start: viewersPart((*viewers.Module).StartPush)},
	"viewers.reader":     {needs: deps(needRedis, needReadOnly), start: viewersPart((*viewers.Module).StartReader)},
	"viewers.controller": {needs: deps(needRedis, needPostgres), start: viewersPart((*viewers.Module).StartController)},
	"viewers.abuse":      {needs: deps(needRedis, needPostgres), start: viewersPart((*viewers.Module).StartAbuse)},

	"presence.changes":   {needs: deps(needRedis), start: presencePart((*presence.Module).StartChanges)},
	"presence.gateway":   {needs: deps(needRedis, needPostgres), after: names("presence.changes"), start: presencePart((*presence.Module).StartGateway)},
	"presence.read":      {needs: deps(needRedis, needPostgres), start: presencePart((*presence.Module).StartRead)},
	"presence.lifecycle": {needs: deps(needRedis), after: names("presence.changes"), start: presencePart((*presence.Module).StartLifecycle)},

	"waitingroom.verify": {needs: deps(needRedis), secrets: names(secretPassVerify), start: waitingroomPart((*waitingroom.Module).StartVerify)},
	"waitingroom.leases": {needs: deps(needRedis), start: waitingroomPart((*waitingroom.Module).StartLeases)},
	"waitingroom.admit":  {needs: deps(needRedis), secrets: names(secretPassSigning), start: waitingroomPart((*waitingroom.Module).StartAdmit)},
	"waitingroom.ticker": {needs: deps(needRedis), start: waitingroomPart((*waitingroom.Module).StartTicker)},

	"booking.seatmap":   {needs: deps(needRedis, needReadOnly), start: bookingPart((*booking.Module).StartSeatMap)},
	"booking.live":      {needs: deps(needRedis, needReadOnly), start: bookingPart((*booking.Module).StartLive)},
	"booking.holds":     {needs: deps(needRedis, needPostgres), after: names("waitingroom.verify", "outbox.age"), start: bookingPart((*booking.Module).StartHolds)},
	"booking.stays":     {needs: deps(needRedis, needPostgres), after: names("waitingroom.verify"), start: bookingPart((*booking.Module).StartStays)},
	"booking.search":    {needs: deps(needRedis, needReadOnly), after: names("viewers.reader"), start: bookingPart((*booking.Module).StartSearch)},
	"booking.directory": {needs: deps(needPostgres), start: bookingPart((*booking.Module).StartDirectory)},
	"booking.expiry":    {needs: deps(needRedis, needPostgres), after: names("waitingroom.leases"), start: bookingPart((*booking.Module).StartExpiry)},

	// The outbox's age is exported by the planes that write it (booking)
	// and relay it (worker), so it still shows when every relay is gone.
	"outbox.age":   {needs: deps(needPostgres), start: startOutboxAge},
	"outbox.relay": {needs: deps(needRedis, needPostgres), after: names("outbox.age"), start: startOutboxRelay},

	"payments.api":         {needs: deps(needPostgres), secrets: names(secretPayments), start: paymentsPart((*payments.Module).StartAPI)},
	"payments.webhooks":    {needs: deps(needWebhook), secrets: names(secretPayments), start: paymentsPart((*payments.Module).StartWebhooks)},
	"payments.fulfillment": {needs: deps(needRedis, needPostgres), secrets: names(secretPayments), start: paymentsPart((*payments.Module).StartFulfillment)},
	"payments.refunds":     {needs: deps(needPostgres), secrets: names(secretPayments), start: paymentsPart((*payments.Module).StartRefunds)},
}

func deps(d ...dependency) []dependency { return d }
func names(n ...string) []string        { return n }

// RoleNames lists the valid roles, "all" last.
func RoleNames() []string {
	names := make([]string, 0, len(roles)+1)
	for _, r := range roles {
		names = append(names, r.name)
	}
	return append(names, "all")
}

// ResolveRoles validates a role list (names may be comma separated) and
// returns the roles and the parts they start, each once, in table order
// with every part's `after` parts before it.
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
			partNames = withAfter(partNames, p)
		}
	}
	return roleNames, partNames, nil
}

// withAfter appends p to list, preceded by the parts it starts after.
func withAfter(list []string, p string) []string {
	if slices.Contains(list, p) {
		return list
	}
	for _, dep := range parts[p].after {
		list = withAfter(list, dep)
	}
	return append(list, p)
}

// RoleInfo describes a role for `presenced roles`.
type RoleInfo struct {
	Name  string     `json:"name"`
	Holds string     `json:"holds"`
	Parts []PartInfo `json:"parts"`
	// Stores and Secrets are what a process of the role must be given:
	// the stores its built parts connect to, and the secret groups of its
	// parts and of every process.
	Stores  []string `json:"stores"`
	Secrets []string `json:"secrets"`
}

// PartInfo describes one part of a role.
type PartInfo struct {
	Name  string `json:"name"`
	Built bool   `json:"built"`
	// For names the role's parts that need this one, when no role names it.
	For     []string `json:"for,omitempty"`
	Needs   []string `json:"needs"`
	Secrets []string `json:"secrets,omitempty"`
}

// Table is the role table as data: `presenced roles --json`.
type Table struct {
	Roles []RoleInfo `json:"roles"`
	// Settings names the settings (config keys) that carry each store
	// and secret group; Optional those that may be left out.
	Settings map[string][]string `json:"settings"`
	Optional []string            `json:"optional"`
}

// RoleTable describes the role table.
func RoleTable() Table {
	return Table{Roles: Roles(), Settings: settingsOf, Optional: optionalSettings}
}

// Roles describes the role table.
func Roles() []RoleInfo {
	var out []RoleInfo
	for _, r := range roles {
		info := RoleInfo{Name: r.name, Holds: r.holds, Secrets: slices.Clone(everyProcess)}
		var resolved []string
		for _, p := range r.parts {
			resolved = withAfter(resolved, p)
		}
		for _, name := range resolved {
			p := parts[name]
			pi := PartInfo{Name: name, Built: p.start != nil, Secrets: p.secrets}
			if !slices.Contains(r.parts, name) {
				for _, other := range r.parts {
					if slices.Contains(parts[other].after, name) {
						pi.For = append(pi.For, other)
					}
				}
			}
			for _, n := range p.needs {
				pi.Needs = append(pi.Needs, string(n))
				if pi.Built && !slices.Contains(info.Stores, string(n)) {
					info.Stores = append(info.Stores, string(n))
				}
			}
			for _, g := range p.secrets {
				if pi.Built && !slices.Contains(info.Secrets, g) {
					info.Secrets = append(info.Secrets, g)
				}
			}
			info.Parts = append(info.Parts, pi)
		}
		slices.Sort(info.Stores)
		slices.Sort(info.Secrets)
		out = append(out, info)
	}
	return out
}

// needsSecret tells whether any of partNames in table needs the secret
// group.
func needsSecret(table map[string]part, partNames []string, group string) bool {
	return slices.ContainsFunc(partNames, func(p string) bool { return slices.Contains(table[p].secrets, group) })
}

// SettingsFor returns the settings a process of the named roles must be
// given (required) and the ones it may be given (allowed, required
// included): those of its stores and secret groups, and nothing else. A
// process whose only PostgreSQL login is the read-only one is given it as
// its postgres.url too.
func (t Table) SettingsFor(roleNames ...string) (required, allowed []string) {
	var groups []string
	for _, r := range t.Roles {
		if slices.Contains(roleNames, r.Name) || slices.Contains(roleNames, "all") {
			groups = append(append(groups, r.Stores...), r.Secrets...)
		}
	}
	if slices.Contains(groups, string(needReadOnly)) && !slices.Contains(groups, string(needPostgres)) {
		groups = append(groups, string(needPostgres))
	}
	for _, g := range groups {
		for _, s := range t.Settings[g] {
			if slices.Contains(allowed, s) {
				continue
			}
			allowed = append(allowed, s)
			if !slices.Contains(t.Optional, s) {
				required = append(required, s)
			}
		}
	}
	slices.Sort(required)
	slices.Sort(allowed)
	return required, allowed
}
