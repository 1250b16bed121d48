package presence

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/hub"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/web"
)

// Deps are what the module is built from.
type Deps struct {
	Config config.Presence
	// SendQueue is realtime.send_queue: the frames a connection may have
	// waiting before it is dropped.
	SendQueue int
	Redis     redis.UniversalClient
	Hub       *hub.Hub
	Keys      store.Keyspace
	// Contacts is nil in processes without PostgreSQL (the worker); the
	// contacts policy and the contact API need it.
	Contacts *Contacts
	// Users verifies user tokens; nil in processes serving no user API.
	Users   *auth.Verifier
	Sockets *web.Sockets
	Metrics prometheus.Registerer
	Log     *slog.Logger
}

// Module is the presence module of one process. Build it once; its parts
// (gateway, read API, lifecycle) share it.
type Module struct {
	cfg      config.Presence
	log      *slog.Logger
	m        *metrics
	rdb      redis.UniversalClient
	hub      *hub.Hub
	keys     keys
	st       *stateStore
	contacts *Contacts
	policy   Policy
	users    *auth.Verifier
	sockets  *web.Sockets
	id       string // this process, in control messages
	f        *fanout
	gw       *gateway
	changes  *changeWriter

	writerOnce sync.Once
}

// New builds the module.
func New(d Deps) (*Module, error) {
	if d.Redis == nil || d.Hub == nil {
		return nil, errors.New("presence: Redis and the hub are required")
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	m, err := newMetrics(d.Metrics)
	if err != nil {
		return nil, fmt.Errorf("presence: metrics: %w", err)
	}
	k := keys{ks: d.Keys, shards: d.Config.Shards}
	st := newStateStore(d.Redis, k, d.Config)
	mod := &Module{
		cfg: d.Config, log: d.Log, m: m, rdb: d.Redis, hub: d.Hub, keys: k, st: st,
		contacts: d.Contacts, users: d.Users, sockets: d.Sockets, id: store.NewToken()[:12],
	}
	var lister ContactLister
	if d.Contacts != nil {
		lister = d.Contacts
	}
	if d.Config.Policy == config.PresencePolicyOpen || lister != nil {
		if mod.policy, err = NewPolicy(d.Config.Policy, lister, st); err != nil {
			return nil, err
		}
	}
	mod.f = newFanout(d.Hub, st, m, d.Log, d.Config.CoalesceTick)
	mod.changes = newChangeWriter(mod)
	return mod, nil
}

// Gateway mounts the WebSocket endpoint and returns the loop that serves
// it (control messages, flushing); run it with the process's loops.
func (m *Module) Gateway(g *echo.Group, sendQueue int) (func(ctx context.Context) error, error) {
	if m.users == nil || m.sockets == nil || m.policy == nil {
		return nil, errors.New("presence: the gateway needs the user verifier, sockets and a policy")
	}
	m.gw = newGateway(m, sendQueue)
	g.GET("/v1/presence/ws", m.gw.handle)
	return m.gw.run, nil
}

// ChangeWriter returns the loop that queues status changes for webhooks; it
// runs once per process that changes statuses (gateway or worker).
func (m *Module) ChangeWriter() (func(ctx context.Context) error, bool) {
	first := false
	m.writerOnce.Do(func() { first = true })
	return m.changes.run, first
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
