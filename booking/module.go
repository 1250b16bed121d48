package booking

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/admission"
	"github.com/presenced/presenced/internal/module"
	"github.com/presenced/presenced/store"
)

// Deps are what the module is built from. It holds no store: each part
// takes its stores from the host as it starts.
type Deps struct {
	Config config.Booking
	Keys   store.Keyspace
	// Admission checks buyers' passes (the waiting room, through the app).
	Admission Admission
	// LeaseTimeout bounds a Redis call on the admission leases (the waiting
	// room's store_timeout; 2 s when zero).
	LeaseTimeout time.Duration
	// Viewers counts who looks at each hotel, for search (the viewers
	// module, through the app).
	Viewers ViewerCounts
	Metrics prometheus.Registerer
	Log     *slog.Logger
}

// Module is one process's booking module. Its parts start one at a time;
// the booking plane and the expiry worker share the write side, the browse
// plane's parts share the seat map.
type Module struct {
	cfg       config.Booking
	keys      store.Keyspace
	admission Admission
	leaseWait time.Duration
	viewers   ViewerCounts
	m         *metrics
	sm        *stayMetrics
	log       *slog.Logger

	holds     *holdsPlane
	seatMap   *seatMap
	stays     *staysPlane
	search    *search
	directory *pgxpool.Pool
	admin     *pgxpool.Pool
}

// New builds the module; nothing runs until a part starts.
func New(d Deps) (*Module, error) {
	if d.Admission == nil || d.Viewers == nil || d.Metrics == nil || d.Log == nil {
		return nil, errors.New("booking: an admission checker, viewer counts, metrics and a logger are required")
	}
	m, err := newMetrics(d.Metrics)
	if err != nil {
		return nil, err
	}
	sm, err := newStayMetrics(d.Metrics)
	if err != nil {
		return nil, err
	}
	wait := d.LeaseTimeout
	if wait <= 0 {
		wait = 2 * time.Second
	}
	return &Module{cfg: d.Config, keys: d.Keys, admission: d.Admission, leaseWait: wait, viewers: d.Viewers,
		m: m, sm: sm, log: d.Log}, nil
}

// StartHolds mounts holds, reservations and event administration (booking
// role).
func (m *Module) StartHolds(ctx context.Context, h module.Host) error {
	holds, err := m.openHolds(ctx, h)
	if err != nil {
		return err
	}
	users, err := h.Users()
	if err != nil {
		return err
	}
	holds.Routes(h.Routes(), users.Middleware(), h.RequireAPIKey())
	return nil
}

// StartStays mounts stay holds and hotel administration (booking role).
// Stays share the holds plane: one path for reservations of both kinds.
func (m *Module) StartStays(ctx context.Context, h module.Host) error {
	holds, err := m.openHolds(ctx, h)
	if err != nil {
		return err
	}
	users, err := h.Users()
	if err != nil {
		return err
	}
	if m.stays == nil {
		m.stays = newStays(holds, m.sm)
	}
	m.stays.Routes(h.Routes(), users.Middleware(), h.RequireAPIKey())
	return nil
}

// StartSearch mounts the hotel search (browse role, read-only login).
func (m *Module) StartSearch(ctx context.Context, h module.Host) error {
	ro, err := h.Postgres(ctx, store.PoolReadOnly)
	if err != nil {
		return err
	}
	rdb, err := h.Redis(ctx)
	if err != nil {
		return err
	}
	m.search, err = newSearch(searchDeps{ReadOnly: ro, Redis: rdb, Keys: m.keys, Viewers: m.viewers,
		Config: m.cfg, Metrics: m.sm, Log: m.log})
	if err != nil {
		return err
	}
	m.search.Routes(h.Routes())
	return nil
}

// StartDirectory opens the hotel directory other modules list hotels from
// (HotelsSince): the viewers' registry on the ingest and count planes.
func (m *Module) StartDirectory(ctx context.Context, h module.Host) error {
	db, err := h.Postgres(ctx, store.PoolMain)
	if err != nil {
		return err
	}
	m.directory = db
	return nil
}

// StartAdmin opens what the administration calls of the in-process API
// (CreateEvent, CreatePromotion, CreateHotel) write to: the main pool. The
// one-shot commands of the CLI start it; it mounts no route and runs no
// loop (the booking role's own administration routes are StartHolds' and
// StartStays').
func (m *Module) StartAdmin(ctx context.Context, h module.Host) error {
	db, err := h.Postgres(ctx, store.PoolMain)
	if err != nil {
		return err
	}
	m.admin = db
	return nil
}

// StartExpiry runs the reclaiming of expired holds (worker role).
func (m *Module) StartExpiry(ctx context.Context, h module.Host) error {
	holds, err := m.openHolds(ctx, h)
	if err != nil {
		return err
	}
	h.Go("booking.expiry", (&expirer{h: holds}).Run)
	return nil
}

// StartSeatMap mounts the seat maps (browse role, read-only login).
func (m *Module) StartSeatMap(ctx context.Context, h module.Host) error {
	sm, err := m.openSeatMap(ctx, h)
	if err != nil {
		return err
	}
	sm.RoutesSeats(h.Routes())
	return nil
}

// StartLive mounts the live seat invalidations (browse role).
func (m *Module) StartLive(ctx context.Context, h module.Host) error {
	sm, err := m.openSeatMap(ctx, h)
	if err != nil {
		return err
	}
	hb, err := h.Hub(ctx)
	if err != nil {
		return err
	}
	h.Sockets().Declare("seatmap")
	sm.RoutesLive(h.Routes(), hb, h.Sockets(), h.RequireAPIKey())
	return nil
}

func (m *Module) openHolds(ctx context.Context, h module.Host) (*holdsPlane, error) {
	if m.holds != nil {
		return m.holds, nil
	}
	db, err := h.Postgres(ctx, store.PoolMain)
	if err != nil {
		return nil, err
	}
	rdb, err := h.Redis(ctx)
	if err != nil {
		return nil, err
	}
	m.holds, err = newHolds(holdsDeps{DB: db, Redis: rdb, Keys: m.keys, Admission: m.admission,
		Leases: admission.NewLeases(rdb, m.keys, m.leaseWait), Config: m.cfg, Metrics: m.m, Log: m.log})
	return m.holds, err
}

func (m *Module) openSeatMap(ctx context.Context, h module.Host) (*seatMap, error) {
	if m.seatMap != nil {
		return m.seatMap, nil
	}
	ro, err := h.Postgres(ctx, store.PoolReadOnly)
	if err != nil {
		return nil, err
	}
	rdb, err := h.Redis(ctx)
	if err != nil {
		return nil, err
	}
	m.seatMap, err = newSeatMap(seatMapDeps{ReadOnly: ro, Redis: rdb, Keys: m.keys, Config: m.cfg, Metrics: m.m, Log: m.log})
	return m.seatMap, err
}
