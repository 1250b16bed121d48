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
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/keyring"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/web"
)

// Deps are what the module is built from.
type Deps struct {
	Redis   redis.UniversalClient
	Keys    store.Keyspace
	Hub     Hub
	Ring    *keyring.Ring // signs passes on the admit plane; nil on a worker, which never touches a pass
	Config  config.Waitingroom
	Metrics prometheus.Registerer
	Log     *slog.Logger
}

// Module is one process's waiting room: the admit plane's endpoints and the
// worker's ticker share it.
type Module struct {
	cfg      config.Waitingroom
	line     *Line
	hub      Hub
	ring     *keyring.Ring
	issuer   *Issuer // nil when the ring cannot sign
	verifier *Verifier
	ticker   *Ticker
	rooms    *rooms
	metrics  *metrics
	log      *slog.Logger
	sockets  *web.Sockets
}

// New builds the module.
func New(d Deps) (*Module, error) {
	if d.Redis == nil || d.Hub == nil || d.Metrics == nil || d.Log == nil {
		return nil, errors.New("waitingroom: missing dependency")
	}
	met, err := newMetrics(d.Metrics)
	if err != nil {
		return nil, err
	}
	m := &Module{
		cfg:     d.Config,
		line:    NewLine(d.Redis, d.Keys),
		hub:     d.Hub,
		ring:    d.Ring,
		metrics: met,
		log:     d.Log,
	}
	if d.Ring != nil {
		m.verifier = NewVerifier(d.Redis, d.Keys, d.Ring, d.Config.StoreTimeout)
	}
	if d.Ring != nil && d.Ring.CanSign() {
		if m.issuer, err = NewIssuer(d.Ring, d.Config.PassTTL); err != nil {
			return nil, err
		}
	}
	m.ticker = newTicker(d.Redis, m.line, d.Hub, d.Config, met, d.Log)
	m.rooms = newRooms(m)
	return m, nil
}

// Line is the module's store of waiting rooms.
func (m *Module) Line() *Line { return m.line }

// Verifier checks passes against live leases.
func (m *Module) Verifier() *Verifier { return m.verifier }

// Ticker is the worker's admission loop.
func (m *Module) Ticker() *Ticker { return m.ticker }

// RunTicker runs the admission ticks until ctx ends.
func (m *Module) RunTicker(ctx context.Context) error { return m.ticker.Run(ctx) }

// Routes are the admit plane's mounting points.
type Routes struct {
	Sockets       *web.Sockets
	RequireUser   echo.MiddlewareFunc
	RequireAPIKey echo.MiddlewareFunc
}

// Mount adds the admit plane's endpoints to g. It fails when this process
// cannot sign passes.
func (m *Module) Mount(g *echo.Group, r Routes) error {
	if m.issuer == nil {
		return errors.New("waitingroom: the admit plane needs a signing key (waitingroom.signing_key)")
	}
	if r.Sockets == nil || r.RequireUser == nil || r.RequireAPIKey == nil {
		return errors.New("waitingroom: missing route dependency")
	}
	m.sockets = r.Sockets
	h := &handlers{m: m}
	g.GET("/v1/waitingroom/keys", h.keys)
	user := g.Group("/v1/waitingroom/:event", h.requireEvent, r.RequireUser)
	user.POST("/join", h.join)
	user.GET("/status", h.status)
	user.POST("/leave", h.leave)
	user.GET("/ws", h.socket)
	admin := g.Group("/v1/admin/waitingrooms/:event", h.requireEvent, r.RequireAPIKey)
	admin.PUT("", h.putSettings)
	admin.GET("", h.getRoom)
	admin.DELETE("", h.deleteRoom)
	return nil
}

// Answers of join, status and the socket.

// queuedAnswer is the place of someone in line.
type queuedAnswer struct {
	State string `json:"state"` // "queued"
	// Position is 1 for the head of the line; null while a lottery has not
	// been drawn.
	Position   *int64 `json:"position"`
	AheadOfYou *int64 `json:"aheadOfYou"`
	// EtaSeconds estimates the wait from the measured admission rate; null
	// when there is no basis (paused, no capacity).
	EtaSeconds    *int64     `json:"etaSeconds"`
	EtaIsEstimate bool       `json:"etaIsEstimate"`
	Paused        bool       `json:"paused,omitempty"`
	OpensAt       *time.Time `json:"opensAt,omitempty"`
	// Lottery is "pending" for an entry whose order is drawn at opening.
	Lottery string `json:"lottery,omitempty"`
}

// admittedAnswer carries the pass of someone admitted.
type admittedAnswer struct {
	State     string    `json:"state"` // "admitted"
	Pass      string    `json:"pass"`
	ExpiresAt time.Time `json:"expiresAt"`
}

func (m *Module) queuedAnswer(room Room, p Place) queuedAnswer {
	a := queuedAnswer{State: StateQueued, EtaIsEstimate: true, Paused: room.Paused}
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

// estimate is the wait of someone with ahead entries in front: the
// measured admission rate of the last eta_window, or, before there is one,
// the pace the settings allow (a batch per tick until capacity is full,
// then capacity per lease). It cannot know how long people ahead linger in
// checkout: an estimate, never a promise.
func (m *Module) estimate(room Room, ahead int64) *int64 {
	if room.Paused || room.Capacity <= 0 {
		return nil
	}
	var secs float64
	if room.Rate > 0 {
		secs = float64(ahead+1) / room.Rate
	} else {
		perTick := float64(room.Batch) / m.cfg.TickInterval.Seconds()
		turnover := float64(room.Capacity) / math.Max(room.Lease.Seconds(), 1)
		first := math.Min(float64(ahead+1), float64(room.Capacity))
		secs = first/perTick + (float64(ahead+1)-first)/turnover
	}
	if !room.OpenAt.IsZero() && room.Now.Before(room.OpenAt) {
		secs += room.OpenAt.Sub(room.Now).Seconds()
	}
	v := int64(math.Ceil(secs))
	return &v
}

func (m *Module) admitted(event, user string, room Room, p Place) (admittedAnswer, error) {
	pass, exp, err := m.issuer.Issue(event, user, p.LeaseExpiry, room.Now)
	if err != nil {
		return admittedAnswer{}, err
	}
	m.metrics.passes.Inc()
	return admittedAnswer{State: StateAdmitted, Pass: pass, ExpiresAt: exp.UTC()}, nil
}

func (m *Module) admittedFrame(event, user string, room Room, p Place, correlationID string) ([]byte, error) {
	a, err := m.admitted(event, user, room, p)
	if err != nil {
		return nil, fmt.Errorf("waitingroom: %w", err)
	}
	return web.EventFrame(eventAdmitted, a, correlationID), nil
}
