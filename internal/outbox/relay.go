package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/store"
)

// Handler applies a derived effect of an event before it is published, such
// as deleting a cached seat map. It runs at least once per event and must be
// idempotent; an error stops the relay at that event until it succeeds.
type Handler func(ctx context.Context, e Event) error

// BatchHandler applies the derived effect of several events of one kind at
// once: all of that kind in a relayed batch, in id order, so an effect that
// many events share (one seat map dropped for a hundred holds) is applied
// once. It runs at least once per event and must be idempotent; an error
// stops the relay before the first of those events until it succeeds.
type BatchHandler func(ctx context.Context, events []Event) error

// RelayConfig configures a Relay.
type RelayConfig struct {
	Pool         *pgxpool.Pool
	Redis        redis.UniversalClient
	Stream       string // Redis stream the events are appended to
	StreamMaxLen int64
	Batch        int
	PollInterval time.Duration
	Retention    time.Duration // published rows older than this are deleted
	Registerer   prometheus.Registerer
	Log          *slog.Logger
}

// Relay publishes committed outbox rows. Several processes may run it: one
// at a time holds the relay's advisory lock, the others wait their turn.
type Relay struct {
	cfg           RelayConfig
	mu            sync.Mutex
	handlers      map[string][]Handler
	batchHandlers map[string][]BatchHandler
	routes        map[string][]string // kind -> streams besides cfg.Stream
	m             *relayMetrics
}

// NewRelay checks cfg and registers the relay's metrics.
func NewRelay(cfg RelayConfig) (*Relay, error) {
	if cfg.Pool == nil || cfg.Redis == nil || cfg.Stream == "" {
		return nil, errors.New("outbox: relay needs a pool, a redis client and a stream")
	}
	if cfg.Batch <= 0 || cfg.PollInterval <= 0 || cfg.StreamMaxLen <= 0 || cfg.Retention <= 0 {
		return nil, errors.New("outbox: batch, poll interval, stream length and retention must be positive")
	}
	m, err := newRelayMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	return &Relay{cfg: cfg, handlers: map[string][]Handler{}, batchHandlers: map[string][]BatchHandler{},
		routes: map[string][]string{}, m: m}, nil
}

// Handle registers a derived effect for events of kind.
func (r *Relay) Handle(kind string, h Handler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handlers[kind] = append(r.handlers[kind], h)
}

// HandleBatch registers a derived effect applied once per batch to all
// events of kind in it.
func (r *Relay) HandleBatch(kind string, h BatchHandler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batchHandlers[kind] = append(r.batchHandlers[kind], h)
}

// Route appends events of kind to stream as well as to the relay's own
// stream, in the same pipeline: a consumer that wants only those events
// reads them there instead of reading, and acknowledging, every event of
// every module.
func (r *Relay) Route(kind, stream string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.routes[kind] = append(r.routes[kind], stream)
}

const lockName = "outbox.relay"

// Run relays until ctx ends. While another process holds the relay lock it
// only retries taking it.
func (r *Relay) Run(ctx context.Context) error {
	tick := time.NewTicker(r.cfg.PollInterval)
	defer tick.Stop()
	var lock *store.AdvisoryLock
	defer func() {
		if lock != nil {
			lock.Release()
		}
		r.m.leader.Set(0)
	}()
	lastCleanup := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if lock != nil && !lock.Alive(ctx) {
			lock.Release()
			lock = nil
			r.m.leader.Set(0)
		}
		if lock == nil {
			l, err := store.TryAdvisoryLock(ctx, r.cfg.Pool, lockName)
			if err != nil {
				r.cfg.Log.Warn("outbox relay: take lock", "err", err)
				continue
			}
			if l == nil {
				continue // another process relays
			}
			lock = l
			r.m.leader.Set(1)
		}
		for {
			n, err := r.RelayOnce(ctx)
			if err != nil {
				if ctx.Err() == nil {
					r.m.errors.Inc()
					r.cfg.Log.Warn("outbox relay", "err", err)
				}
				break
			}
			if n < r.cfg.Batch {
				break
			}
		}
		if time.Since(lastCleanup) > time.Minute {
			lastCleanup = time.Now()
			if err := r.cleanup(ctx); err != nil && ctx.Err() == nil {
				r.cfg.Log.Warn("outbox cleanup", "err", err)
			}
		}
	}
}

const selectUnpublished = `
SELECT id, kind, aggregate_id, payload, created_at
FROM outbox WHERE published_at IS NULL ORDER BY id LIMIT $1`

// RelayOnce publishes up to one batch and returns how many it published.
// Callers must make sure only one relay runs at a time (Run holds the
// advisory lock); tests call it directly.
func (r *Relay) RelayOnce(ctx context.Context) (int, error) {
	rows, err := r.cfg.Pool.Query(ctx, selectUnpublished, r.cfg.Batch)
	if err != nil {
		return 0, fmt.Errorf("read outbox: %w", err)
	}
	var batch []Event
	for rows.Next() {
		var e Event
		if err := rows.Scan(&e.ID, &e.Kind, &e.AggregateID, &e.Payload, &e.CreatedAt); err != nil {
			rows.Close()
			return 0, fmt.Errorf("read outbox: %w", err)
		}
		batch = append(batch, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("read outbox: %w", err)
	}
	// Every event's derived effects run before it is appended to the
	// stream; the appends of the batch then go out in one pipeline.
	var pubErr error
	ready := batch
	for i, e := range batch {
		if err := r.effects(ctx, e); err != nil {
			pubErr = fmt.Errorf("event %d (%s): %w", e.ID, e.Kind, err)
			ready = batch[:i]
			break
		}
	}
	if i, err := r.batchEffects(ctx, ready); err != nil {
		pubErr = errors.Join(pubErr, fmt.Errorf("event %d (%s): %w", ready[i].ID, ready[i].Kind, err))
		ready = ready[:i]
	}
	n, err := r.append(ctx, ready)
	if err != nil {
		pubErr = errors.Join(pubErr, err)
	}
	published := make([]int64, 0, n)
	for _, e := range ready[:n] {
		published = append(published, e.ID)
	}
	// What went out is marked in one statement, also when an event stopped
	// the batch. Published but not marked (the process dies first, the
	// update fails): it goes out again, which idempotent consumers absorb.
	if len(published) > 0 {
		if _, err := r.cfg.Pool.Exec(ctx, markPublished, published); err != nil {
			return 0, errors.Join(pubErr, fmt.Errorf("mark %d events published: %w", len(published), err))
		}
		for _, e := range batch[:len(published)] {
			r.m.published.WithLabelValues(e.Kind).Inc()
		}
	}
	return len(published), pubErr
}

const markPublished = `UPDATE outbox SET published_at = clock_timestamp() WHERE id = ANY($1)`

// effects runs the derived effects registered for e's kind.
func (r *Relay) effects(ctx context.Context, e Event) error {
	r.mu.Lock()
	hs := r.handlers[e.Kind]
	r.mu.Unlock()
	for _, h := range hs {
		if err := h(ctx, e); err != nil {
			return fmt.Errorf("derived effect: %w", err)
		}
	}
	return nil
}

// batchEffects runs the batch handlers of every kind in events, kinds in
// the order they first appear. On an error it returns the index of the
// first event of the failing kind: the events before it may go out.
func (r *Relay) batchEffects(ctx context.Context, events []Event) (int, error) {
	r.mu.Lock()
	handlers := make(map[string][]BatchHandler, len(r.batchHandlers))
	for k, hs := range r.batchHandlers {
		handlers[k] = slices.Clone(hs)
	}
	r.mu.Unlock()
	var kinds []string
	byKind := map[string][]Event{}
	first := map[string]int{}
	for i, e := range events {
		if len(handlers[e.Kind]) == 0 {
			continue
		}
		if _, ok := byKind[e.Kind]; !ok {
			kinds = append(kinds, e.Kind)
			first[e.Kind] = i
		}
		byKind[e.Kind] = append(byKind[e.Kind], e)
	}
	failed, stop := len(events), error(nil)
	for _, k := range kinds {
		for _, h := range handlers[k] {
			if err := h(ctx, byKind[k]); err != nil && first[k] < failed {
				failed, stop = first[k], fmt.Errorf("derived effect: %w", err)
			}
		}
	}
	if stop != nil {
		return failed, stop
	}
	return 0, nil
}

// append adds events to the stream, and routed kinds to their own streams
// too, in one pipelined round trip, in order, and returns how many of the
// events, from the first, are known to be in every stream they go to.
func (r *Relay) append(ctx context.Context, events []Event) (int, error) {
	if len(events) == 0 {
		return 0, nil
	}
	streams := make([][]string, len(events))
	r.mu.Lock()
	for i, e := range events {
		streams[i] = append([]string{r.cfg.Stream}, r.routes[e.Kind]...)
	}
	r.mu.Unlock()
	owner := make([]int, 0, len(events)) // the event of each queued command
	cmds, err := r.cfg.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, e := range events {
			values := map[string]any{
				"id":        strconv.FormatInt(e.ID, 10),
				"kind":      e.Kind,
				"aggregate": e.AggregateID,
				"payload":   string(e.Payload),
				"createdAt": e.CreatedAt.UTC().Format(time.RFC3339Nano),
			}
			for _, stream := range streams[i] {
				p.XAdd(ctx, &redis.XAddArgs{Stream: stream, MaxLen: r.cfg.StreamMaxLen, Approx: true, Values: values})
				owner = append(owner, i)
			}
		}
		return nil
	})
	for j, c := range cmds {
		if c.Err() != nil {
			i := owner[j]
			return i, fmt.Errorf("event %d (%s): append to stream: %w", events[i].ID, events[i].Kind, c.Err())
		}
	}
	if err != nil {
		return 0, fmt.Errorf("append to stream: %w", err)
	}
	return len(events), nil
}

func (r *Relay) cleanup(ctx context.Context) error {
	_, err := r.cfg.Pool.Exec(ctx, `
DELETE FROM outbox WHERE id IN (
	SELECT id FROM outbox WHERE published_at < statement_timestamp() - make_interval(secs => $1) LIMIT 10000)`,
		r.cfg.Retention.Seconds())
	return err
}

type relayMetrics struct {
	published *prometheus.CounterVec
	errors    prometheus.Counter
	leader    prometheus.Gauge
}

func newRelayMetrics(reg prometheus.Registerer) (*relayMetrics, error) {
	m := &relayMetrics{
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_outbox_published_total",
			Help: "Outbox events published, by kind.",
		}, []string{"kind"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_outbox_relay_errors_total",
			Help: "Relay rounds stopped by an error (the event is retried).",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "presenced_outbox_relay_leader",
			Help: "1 while this process holds the relay lock.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.published, m.errors, m.leader} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
