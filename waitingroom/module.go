// Package waitingroom is a fair line in front of a sale that admits exactly
// as many people as checkout can hold.
//
// Per event, Redis holds the line (a sorted set by an atomic sequence
// number), the heartbeat index, the checkout leases (by expiry), the
// sequence, the settings and the tick bookkeeping, all under the event's
// hash tag. The admit plane (no database credentials) serves join, status
// and the WebSocket that pushes positions and, on admission, a pass signed
// with Ed25519. The workers run one admission tick per event per period
// under a tick lease: admit min(capacity - active, batch) from the head,
// re-checking each candidate's heartbeat. The booking plane checks passes
// with the Verifier, which also requires the live lease. Every store failure
// fails closed: nobody is admitted or verified by an error.
package waitingroom

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/admission"
	"github.com/presenced/presenced/internal/keyring"
	"github.com/presenced/presenced/internal/module"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/web/socket"
	"github.com/presenced/presenced/web/wire"
)

// Deps are what the module is built from. It holds no store: each part
// takes its stores from the host as it starts.
type Deps struct {
	Config config.Waitingroom
	Keys   store.Keyspace
	// PassKeys loads the pass keys: the admit plane signs passes with them,
	// the booking plane only verifies. Only the parts that need keys call it.
	PassKeys func() (*keyring.Ring, error)
	Metrics  prometheus.Registerer
	Log      *slog.Logger
}

// Module is one process's waiting room. Its parts start one at a time and
// share the line (the Redis side of every event's room).
type Module struct {
	cfg      config.Waitingroom
	keys     store.Keyspace
	passKeys func() (*keyring.Ring, error)
	metrics  *metrics
	log      *slog.Logger

	line     *lineStore
	hub      pubsub
	ring     *keyring.Ring
	issuer   *admission.Issuer // the admit plane's
	verifier *admission.Verifier
	rooms    *rooms
	sockets  *socket.Sockets
}

// New builds the module; nothing runs until a part starts.
func New(d Deps) (*Module, error) {
	if d.PassKeys == nil || d.Metrics == nil || d.Log == nil {
		return nil, errors.New("waitingroom: pass keys, metrics and a logger are required")
	}
	met, err := newMetrics(d.Metrics)
	if err != nil {
		return nil, err
	}
	m := &Module{cfg: d.Config, keys: d.Keys, passKeys: d.PassKeys, metrics: met, log: d.Log}
	m.rooms = newRooms(m)
	return m, nil
}

// StartVerify readies the pass checks other modules call (Verify, Extend,
// Release). It needs only the public keys.
func (m *Module) StartVerify(ctx context.Context, h module.Host) error {
	if err := m.open(ctx, h); err != nil {
		return err
	}
	ring, err := m.keyring()
	if err != nil {
		return err
	}
	m.verifier = admission.NewVerifier(admission.NewChecker(ring), m.leases())
	return nil
}

// leases are the checkout leases of every event's room, each call bounded
// by store_timeout.
func (m *Module) leases() *admission.Leases {
	return admission.NewLeases(m.line.rdb, m.keys, m.cfg.StoreTimeout)
}

// StartLeases readies Extend and Release without pass keys: the expiry
// worker ends the leases of expired holds but checks no pass.
func (m *Module) StartLeases(ctx context.Context, h module.Host) error {
	if err := m.open(ctx, h); err != nil {
		return err
	}
	if m.verifier == nil {
		m.verifier = admission.NewVerifier(admission.NewChecker(nil), m.leases())
	}
	return nil
}

// StartAdmit mounts join, status, leave, the socket, the public keys and
// the admin API (admit role). It needs the signing key.
func (m *Module) StartAdmit(ctx context.Context, h module.Host) error {
	if err := m.open(ctx, h); err != nil {
		return err
	}
	ring, err := m.keyring()
	if err != nil {
		return err
	}
	if m.issuer, err = admission.NewIssuer(ring, m.cfg.PassTTL); err != nil {
		return fmt.Errorf("the admit plane signs passes: %w", err)
	}
	if m.hub, err = h.Hub(ctx); err != nil {
		return err
	}
	users, err := h.Users()
	if err != nil {
		return err
	}
	m.sockets = h.Sockets()
	m.sockets.Declare("waitingroom")
	hd := &handlers{m: m}
	g := h.Routes()
	g.Match([]string{http.MethodGet, http.MethodHead}, "/v1/waitingroom/keys", hd.keys)
	// Middleware per route, not on a group: echo gives a group with
	// middleware catch-all routes that run it, so a wrong method (GET of
	// /join) or path under the group answered 401 or 400, never 405 or 404.
	user := []echo.MiddlewareFunc{hd.requireEvent, users.Middleware()}
	g.POST("/v1/waitingroom/:event/join", hd.join, user...)
	g.GET("/v1/waitingroom/:event/status", hd.status, user...)
	g.POST("/v1/waitingroom/:event/leave", hd.leave, user...)
	g.GET("/v1/waitingroom/:event/ws", hd.socket, user...)
	g.GET("/v1/admin/waitingrooms", hd.listRooms, h.RequireAPIKey())
	admin := []echo.MiddlewareFunc{hd.requireEvent, h.RequireAPIKey()}
	g.PUT("/v1/admin/waitingrooms/:event", hd.putSettings, admin...)
	g.GET("/v1/admin/waitingrooms/:event", hd.getRoom, admin...)
	g.DELETE("/v1/admin/waitingrooms/:event", hd.deleteRoom, admin...)
	return nil
}

// StartTicker runs the admission ticks (worker role). It signs nothing.
func (m *Module) StartTicker(ctx context.Context, h module.Host) error {
	if err := m.open(ctx, h); err != nil {
		return err
	}
	hb, err := h.Hub(ctx)
	if err != nil {
		return err
	}
	rdb, err := h.Redis(ctx)
	if err != nil {
		return err
	}
	t := newTicker(rdb, m.line, hb, m.cfg, m.metrics, m.log)
	h.Go("waitingroom.ticker", t.Run)
	return nil
}

// open connects the line on the first part's Redis.
func (m *Module) open(ctx context.Context, h module.Host) error {
	if m.line != nil {
		return nil
	}
	rdb, err := h.Redis(ctx)
	if err != nil {
		return err
	}
	m.line = newLineStore(rdb, m.keys)
	return nil
}

func (m *Module) keyring() (*keyring.Ring, error) {
	if m.ring != nil {
		return m.ring, nil
	}
	ring, err := m.passKeys()
	if err != nil {
		return nil, fmt.Errorf("waitingroom: pass keys: %w", err)
	}
	m.ring = ring
	return ring, nil
}

func (m *Module) queuedAnswer(room roomState, p placeInLine) QueuedAnswer {
	a := QueuedAnswer{State: StateQueued, EtaIsEstimate: true, Paused: room.Paused}
	if !room.OpenAt.IsZero() && room.Now.Before(room.OpenAt) {
		at := room.OpenAt.UTC()
		a.OpensAt = &at
	}
	if p.Undrawn {
		a.Lottery = "pending"
		return a
	}
	pos, ahead := p.Rank+1, p.Rank
	a.Position, a.AheadOfYou = &pos, &ahead
	a.EtaSeconds = m.estimate(room, ahead)
	return a
}

// estimate is the wait of someone with ahead entries in front. The free
// places (capacity minus live leases) go to the head of the line a batch
// per tick, whatever the rate: in a quiet room the measured rate counts how
// few came, not how long the next one waits. Past the free places, the wait
// is the measured admission rate of the last eta_window, or, before there
// is one, capacity per lease. It cannot know how long people ahead linger
// in checkout: an estimate, never a promise.
func (m *Module) estimate(room roomState, ahead int64) *int64 {
	if room.Paused || room.Capacity <= 0 {
		return nil
	}
	n := float64(ahead + 1)
	free := float64(max(room.Capacity-room.Active, 0))
	first := math.Min(n, free)
	secs := math.Ceil(first/float64(max(room.Batch, 1))) * m.cfg.TickInterval.Seconds()
	if rest := n - first; rest > 0 {
		rate := room.Rate
		if rate <= 0 {
			rate = float64(room.Capacity) / math.Max(room.Lease.Seconds(), 1)
		}
		secs += rest / rate
	}
	if !room.OpenAt.IsZero() && room.Now.Before(room.OpenAt) {
		secs += room.OpenAt.Sub(room.Now).Seconds()
	}
	v := int64(math.Ceil(secs))
	return &v
}

func (m *Module) admitted(event, user string, room roomState, p placeInLine) (AdmittedAnswer, error) {
	pass, exp, err := m.issuer.Issue(event, user, p.LeaseExpiry, room.Now)
	if err != nil {
		return AdmittedAnswer{}, err
	}
	m.metrics.passes.Inc()
	return AdmittedAnswer{State: StateAdmitted, Pass: pass, ExpiresAt: exp.UTC()}, nil
}

func (m *Module) admittedFrame(event, user string, room roomState, p placeInLine, correlationID string) ([]byte, error) {
	a, err := m.admitted(event, user, room, p)
	if err != nil {
		return nil, fmt.Errorf("waitingroom: %w", err)
	}
	return wire.EventFrame(EventAdmitted, a, correlationID), nil
}
