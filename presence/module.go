package presence

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/hub"
	"github.com/presenced/presenced/internal/module"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/web/socket"
)

// Deps are what the module is built from. It holds no store: each part
// takes its stores from the host as it starts.
type Deps struct {
	Config  config.Presence
	Keys    store.Keyspace
	Metrics prometheus.Registerer
	Log     *slog.Logger
}

// Module is the presence module of one process. Its parts (gateway, read
// API, lifecycle, change writer) start one at a time and share it.
type Module struct {
	cfg     config.Presence
	log     *slog.Logger
	m       *metrics
	keys    keys
	id      string // this process, in control messages
	changes *changeWriter
	audit   *auditWriter

	// Set by the first part to start.
	rdb redis.UniversalClient
	hub *hub.Hub
	st  *stateStore
	f   *fanout
	// Set by the parts serving users (gateway, read API).
	contacts *contactStore
	policy   policy
	// hidesLastActive answers whose lastActiveAt a viewer may not see.
	hidesLastActive func(ctx context.Context, viewer string, subjects []string) ([]string, error)
	users           *auth.Verifier
	sockets         *socket.Sockets
	gw              *gateway
}

// New builds the module; nothing runs until a part starts.
func New(d Deps) (*Module, error) {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	m, err := newMetrics(d.Metrics)
	if err != nil {
		return nil, fmt.Errorf("presence: metrics: %w", err)
	}
	mod := &Module{
		cfg: d.Config, log: d.Log, m: m,
		keys: newKeys(d.Keys, d.Config.Shards), id: store.NewToken()[:12],
	}
	mod.changes = newChangeWriter(mod)
	mod.audit = newAuditWriter(mod)
	return mod, nil
}

// StartGateway mounts the WebSocket gateway (presence role).
func (m *Module) StartGateway(ctx context.Context, h module.Host) error {
	if err := m.openUsers(ctx, h); err != nil {
		return err
	}
	m.sockets = h.Sockets()
	m.sockets.Declare("presence")
	m.gw = newGateway(m)
	h.Routes().GET("/v1/presence/ws", m.gw.handle)
	h.Go("presence.gateway", m.gw.run)
	return nil
}

// StartRead mounts the read API and the contact API (presence role):
//
//	GET  /v1/presence/users/:id       user JWT, same visibility as the gateway
//	POST /v1/presence/query           API key, up to presence.max_query_users ids
//	PUT  /v1/presence/contacts/:user  API key, replace a contact list
//	GET  /v1/presence/contacts/:user  API key
//	PUT  /v1/presence/privacy/:user   API key, set or clear invisible
//	GET  /v1/presence/privacy/:user   API key
//	GET  /v1/presence/audit/:user     API key, paginated
func (m *Module) StartRead(ctx context.Context, h module.Host) error {
	if err := m.openUsers(ctx, h); err != nil {
		return err
	}
	api := &readAPI{m: m}
	g, apiKey := h.Routes(), h.RequireAPIKey()
	g.GET("/v1/presence/users/:id", api.user, m.users.Middleware())
	g.POST("/v1/presence/query", api.query, apiKey)
	g.PUT("/v1/presence/contacts/:user", api.putContacts, apiKey)
	g.GET("/v1/presence/contacts/:user", api.getContacts, apiKey)
	g.PUT("/v1/presence/privacy/:user", api.putPrivacy, apiKey)
	g.GET("/v1/presence/privacy/:user", api.getPrivacy, apiKey)
	g.GET("/v1/presence/audit/:user", api.getAudit, apiKey)
	return nil
}

// StartLifecycle runs the session lifecycle (worker role): ping
// consumers, the deadline scheduler, the cleanup consumer and webhook
// delivery. Any number of workers may run it.
func (m *Module) StartLifecycle(ctx context.Context, h module.Host) error {
	if err := m.open(ctx, h); err != nil {
		return err
	}
	h.Go("presence.lifecycle", m.lifecycle)
	return nil
}

// StartChanges runs the writer that queues status changes for webhooks,
// once per process that changes statuses (gateway or lifecycle).
func (m *Module) StartChanges(ctx context.Context, h module.Host) error {
	if err := m.open(ctx, h); err != nil {
		return err
	}
	h.Go("presence.changes", m.changes.run)
	return nil
}

// open connects the state store and the fan-out on the first part's Redis.
func (m *Module) open(ctx context.Context, h module.Host) error {
	if m.st != nil {
		return nil
	}
	rdb, err := h.Redis(ctx)
	if err != nil {
		return err
	}
	hb, err := h.Hub(ctx)
	if err != nil {
		return err
	}
	m.rdb, m.hub = rdb, hb
	m.st = newStateStore(rdb, m.keys, m.cfg, hb.PublishCommand())
	m.f = newFanout(hb, m.st, m.m, m.log)
	return nil
}

// openUsers readies what serving users needs: their tokens, their contact
// lists and the visibility policy.
func (m *Module) openUsers(ctx context.Context, h module.Host) error {
	if err := m.open(ctx, h); err != nil {
		return err
	}
	if m.policy != nil {
		return nil
	}
	users, err := h.Users()
	if err != nil {
		return err
	}
	pool, err := h.Postgres(ctx, store.PoolMain)
	if err != nil {
		return err
	}
	m.users, m.contacts = users, newContacts(pool)
	m.audit.pool = pool
	h.Go("presence.audit", m.audit.run)
	base, err := newPolicy(m.cfg.Policy, m.contacts, m.st)
	if err != nil {
		return err
	}
	vis := &visibilityPolicy{base: base, settings: m.st, listed: m.contacts}
	m.policy = vis
	m.f.restrictions, m.hidesLastActive = vis.restrictions, vis.hidesLastActive
	return nil
}

// changed handles the side effects of a session step: counts, webhooks,
// one-time notifications, and the follower index of a user gone offline.
func (m *Module) changed(ctx context.Context, res stepResult) {
	if res.Changed {
		label := res.Status.Status
		if label != StatusOnline && label != StatusIdle && label != StatusOffline {
			label = "manual"
		}
		m.m.changes.WithLabelValues(label).Inc()
		m.changes.enqueue(res.Status)
	}
	if len(res.Watchers) > 0 {
		m.fireNotifications(ctx, res.Status, res.Watchers)
	}
	if len(res.Unfollowed) > 0 {
		if err := m.st.removeFollower(ctx, res.Status.User, res.Unfollowed); err != nil {
			m.log.Warn("presence: follower cleanup", "err", err)
		}
	}
}
