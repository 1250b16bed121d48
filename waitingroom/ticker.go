package waitingroom

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/store"
)

// publisher sends the users a tick admitted to the admit plane's sockets.
type publisher interface {
	Publish(ctx context.Context, topic string, payload []byte) error
}

// admittedMessage is the payload published on an event's topic per tick.
type admittedMessage struct {
	Admitted []string `json:"admitted"`
}

const (
	// drawChunk is how many lottery entries one draw step moves.
	drawChunk = 5000
	// concurrentTicks bounds the events one worker ticks at once.
	concurrentTicks = 8
	// eventsReload re-reads the event registry even when its version did not
	// change, repairing a missed update.
	eventsReload = 30 * time.Second
)

// admissionTicker runs the admission ticks on a worker. Events are spread over
// cfg.TickShards leases; each period the worker renews or takes the leases
// of shards that have events and ticks those events. The tick script also
// refuses a second tick of one event within half a period, so a lease that
// changed hands mid-period still makes one tick.
type admissionTicker struct {
	line *lineStore
	pub  publisher
	cfg  config.Waitingroom
	m    *metrics
	log  *slog.Logger

	leases  []*store.Lease
	held    []bool
	events  []string
	version int64
	loaded  time.Time
}

// newTicker returns a ticker over line publishing admissions with pub.
func newTicker(rdb redis.UniversalClient, line *lineStore, pub publisher, cfg config.Waitingroom, m *metrics, log *slog.Logger) *admissionTicker {
	t := &admissionTicker{line: line, pub: pub, cfg: cfg, m: m, log: log, held: make([]bool, cfg.TickShards)}
	for s := 0; s < cfg.TickShards; s++ {
		t.leases = append(t.leases, store.NewLease(rdb, line.registry.Key("tick", strconv.Itoa(s)), cfg.TickLeaseTTL))
	}
	return t
}

// Run ticks every period until ctx ends, then hands its shards back so
// another worker takes over without waiting for the leases to lapse.
func (t *admissionTicker) Run(ctx context.Context) error {
	tk := time.NewTicker(t.cfg.TickInterval)
	defer tk.Stop()
	defer t.releaseAll()
	for {
		t.Cycle(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tk.C:
		}
	}
}

func (t *admissionTicker) releaseAll() {
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.StoreTimeout)
	defer cancel()
	for s, held := range t.held {
		if held {
			_ = t.leases[s].Release(ctx)
			t.held[s] = false
		}
	}
}

// Cycle is one period: refresh the event list, hold the leases of the
// shards with events, tick the events of the shards held.
func (t *admissionTicker) Cycle(ctx context.Context) {
	if err := t.refreshEvents(ctx); err != nil {
		t.m.storeErrors.WithLabelValues("events").Inc()
		t.log.Warn("waitingroom: read events", "err", err)
	}
	byShard := map[int][]string{}
	for _, ev := range t.events {
		s := shardOf(ev, t.cfg.TickShards)
		byShard[s] = append(byShard[s], ev)
	}
	var mine []string
	for s := range t.leases {
		evs := byShard[s]
		if len(evs) == 0 {
			if t.held[s] {
				_ = t.leases[s].Release(ctx)
				t.setHeld(s, false)
			}
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, t.cfg.StoreTimeout)
		ok, err := t.leases[s].TryAcquire(lctx)
		cancel()
		if err != nil {
			t.m.storeErrors.WithLabelValues("tick_lease").Inc()
			ok = false
		}
		t.setHeld(s, ok)
		if ok {
			mine = append(mine, evs...)
		}
	}
	t.tickAll(ctx, mine)
}

func (t *admissionTicker) setHeld(s int, held bool) {
	if held == t.held[s] {
		return
	}
	t.held[s] = held
	if held {
		t.m.leaseChanges.WithLabelValues("acquired").Inc()
	} else {
		t.m.leaseChanges.WithLabelValues("lost").Inc()
	}
}

func (t *admissionTicker) refreshEvents(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, t.cfg.StoreTimeout)
	defer cancel()
	if time.Since(t.loaded) < eventsReload {
		v, err := t.line.EventsVersion(ctx)
		if err != nil {
			return err
		}
		if v == t.version {
			return nil
		}
	}
	events, v, err := t.line.Events(ctx)
	if err != nil {
		return err
	}
	t.events, t.version, t.loaded = events, v, time.Now()
	return nil
}

func (t *admissionTicker) tickAll(ctx context.Context, events []string) {
	var mu sync.Mutex
	var queued, active, capacity int
	g := errgroup.Group{}
	g.SetLimit(concurrentTicks)
	for _, ev := range events {
		g.Go(func() error {
			r, ok := t.TickEvent(ctx, ev)
			if ok {
				mu.Lock()
				queued, active, capacity = queued+r.Queued, active+r.Active, capacity+r.Capacity
				mu.Unlock()
			}
			return nil
		})
	}
	_ = g.Wait()
	t.m.queued.Set(float64(queued))
	t.m.active.Set(float64(active))
	t.m.capacity.Set(float64(capacity))
	t.m.events.Set(float64(len(events)))
}

// TickEvent runs one tick of event (and the lottery draw when it is due),
// publishes whom it admitted, and reports whether the figures are fresh.
func (t *admissionTicker) TickEvent(ctx context.Context, event string) (tickResult, bool) {
	tctx, cancel := context.WithTimeout(ctx, t.cfg.StoreTimeout)
	defer cancel()
	start := time.Now()
	o := tickOptions{
		MinGap:       t.cfg.TickInterval / 2,
		CleanupLimit: t.cfg.CleanupLimit,
		SweepLimit:   t.cfg.SweepLimit,
		Period:       t.cfg.TickInterval,
		OutageGap:    2*t.cfg.TickLeaseTTL + t.cfg.TickInterval,
		Window:       t.cfg.ETAWindow,
	}
	// The sweep goes first, so the tick logs its removals with its own. A
	// failed sweep removed what its finished slices removed; the tick still
	// runs (it re-checks every candidate it admits).
	swept, err := t.line.Sweep(tctx, event, o)
	if err != nil && ctx.Err() == nil {
		t.m.storeErrors.WithLabelValues("sweep").Inc()
		t.log.Warn("waitingroom: sweep failed", "event", event, "err", err)
	}
	o.Swept = swept
	r, err := t.line.Tick(tctx, event, o)
	cancel()
	t.m.tickDuration.Observe(time.Since(start).Seconds())
	if err != nil && ctx.Err() != nil {
		return r, false // shutting down
	}
	if err != nil {
		// The script is atomic: a failed tick admitted nobody.
		t.m.ticks.WithLabelValues("error").Inc()
		t.m.storeErrors.WithLabelValues("tick").Inc()
		t.log.Warn("waitingroom: tick failed; nobody admitted", "event", event, "err", err)
		return r, false
	}
	t.m.ticks.WithLabelValues(r.Status).Inc()
	switch r.Status {
	case "skip", "gone":
		return r, false
	case "draw":
		t.draw(ctx, event)
	}
	t.m.tickAdmits.Observe(float64(len(r.Admitted)))
	t.m.tickAbandons.Observe(float64(r.Abandoned))
	t.m.admitted.Add(float64(len(r.Admitted)))
	t.m.abandoned.Add(float64(r.Abandoned))
	for _, w := range r.Waits {
		t.m.wait.Observe(w.Seconds())
	}
	if len(r.Admitted) > 0 {
		payload, _ := json.Marshal(admittedMessage{Admitted: r.Admitted})
		pctx, cancel := context.WithTimeout(ctx, t.cfg.StoreTimeout)
		// A lost message only delays the news: the sockets re-read their
		// places every position_interval.
		if err := t.pub.Publish(pctx, keysOf(t.line.keys, event).topic, payload); err != nil {
			t.log.Warn("waitingroom: publish admissions", "event", event, "err", err)
		}
		cancel()
	}
	return r, true
}

// draw shuffles the pre-open cohort in steps. Admission waits until the
// draw is complete; an interrupted draw continues at the next tick.
func (t *admissionTicker) draw(ctx context.Context, event string) {
	keys := make([]int64, drawChunk)
	total := 0
	for ctx.Err() == nil {
		for i := range keys {
			keys[i] = randomDrawKey()
		}
		dctx, cancel := context.WithTimeout(ctx, t.cfg.StoreTimeout)
		n, done, err := t.line.Draw(dctx, event, keys)
		cancel()
		if err != nil {
			t.m.storeErrors.WithLabelValues("draw").Inc()
			t.log.Warn("waitingroom: lottery draw step failed; it resumes next tick", "event", event, "err", err)
			return
		}
		total += n
		if done {
			t.log.Info("waitingroom: lottery drawn", "event", event, "entries", total)
			return
		}
	}
}
