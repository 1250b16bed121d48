// Package booking is `presenced loadgen booking`: buyers admitted through
// the waiting room racing for seats, on the booking wire protocol, with a
// check in SQL that no seat has two live owners.
package booking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/pflag"

	"github.com/presenced/presenced/booking"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/loadgen"
	"github.com/presenced/presenced/store"
)

// Scenario is `presenced loadgen booking`: admitted buyers race for a
// few hot seats and for random seats. It creates an event and its waiting
// room, lets every buyer in through the line, then fires one hold per
// buyer; at the end it checks with SQL that no seat has two live owners.
type Scenario struct {
	secrets     loadgen.Secrets
	buyers      int
	sections    string
	hotSeats    int
	hotFraction float64
	cart        int
	after       int
	postgresURL string
	pgbench     string
	pgbenchDB   string
	// bestSection: the hot group asks for the best available seats of this
	// section instead of naming the hot seats ("": they name seats).
	bestSection string
	adjacent    bool
}

// New returns the booking load scenario.
func New() *Scenario { return &Scenario{} }

func (s *Scenario) Name() string { return "booking" }

func (s *Scenario) Describe() string {
	return "admitted buyers race for hot seats and random seats; outcome mix, latency, and a zero-double-ownership check in SQL"
}

func (s *Scenario) Flags(fs *pflag.FlagSet) {
	s.secrets.AddFlags(fs)
	fs.IntVar(&s.buyers, "buyers", 2000, "buyers (each holds at most once: one pending checkout per user and event)")
	fs.StringVar(&s.sections, "sections", "A:50x100@5000,B:50x100@3000", "venue of the generated event (ID:ROWSxSEATS@PRICE,...)")
	fs.IntVar(&s.hotSeats, "hot-seats", 4, "seats everybody in the hot group wants")
	fs.Float64Var(&s.hotFraction, "hot-fraction", 0.5, "share of buyers racing for the hot seats (the others are dealt distinct seats)")
	fs.IntVar(&s.cart, "cart", 2, "seats per hold (1-6)")
	fs.IntVar(&s.after, "after", 0, "also report the rate and latency of the holds after the first N (a sale well under way; 0: off)")
	fs.StringVar(&s.bestSection, "best-available", "", "the hot group asks for the best --cart seats of this section (POST …/holds {section, quantity}) instead of naming the hot seats")
	fs.BoolVar(&s.adjacent, "adjacent", true, "with --best-available: the seats side by side in one row")
	fs.StringVar(&s.postgresURL, "postgres-url", "", "database to verify ownership in (default: the development cluster under --data-dir)")
	fs.StringVar(&s.pgbench, "pgbench", "", `run "pgbench -c 8 -j 2 -b tpcb-like -T 10" on the same PostgreSQL before and after the holds and report the ratio: a path to pgbench, or "auto" (the one on PATH)`)
	fs.StringVar(&s.pgbenchDB, "pgbench-database", "loadgen_pgbench", "pgbench's own database on the server of --postgres-url (created and initialised with pgbench -i when missing)")
}

type buyer struct {
	user, token, pass string
}

func (s *Scenario) Run(ctx context.Context, r *loadgen.Runner) error {
	if err := s.secrets.Resolve(); err != nil {
		return err
	}
	if s.cart < 1 || s.cart > 6 || s.buyers < 1 || s.hotSeats < s.cart {
		return errors.New("--cart must be 1 to 6, --buyers positive, and --hot-seats at least --cart")
	}
	run := &bookingRun{s: s, r: r, base: strings.TrimRight(r.Options.Target, "/")}
	bench, err := s.ceiling(ctx)
	if err != nil {
		return err
	}
	event, seats, err := run.createEvent(ctx)
	if err != nil {
		return err
	}
	buyers, err := run.admitAll(ctx, event)
	if err != nil {
		return err
	}
	var before float64
	if bench != nil {
		if before, err = bench.measure(ctx); err != nil {
			return err
		}
	}
	r.Label("holds")
	r.StartClock()
	holdsFrom := time.Now()
	if r.Options.Requests == 0 || r.Options.Requests > int64(len(buyers)) {
		r.Options.Requests = int64(len(buyers))
	}
	var next atomic.Int64
	outcomes := map[int]int{}
	var mu sync.Mutex
	var hotWins atomic.Int64
	codes := map[string]int{}
	late := &lateHolds{after: s.after}
	r.Loop(ctx, func(ctx context.Context, _ int) error {
		i := int(next.Add(1) - 1)
		b := buyers[i]
		hot := float64(i%100) < s.hotFraction*100
		body := map[string]any{}
		if hot && s.bestSection != "" {
			body = map[string]any{"section": s.bestSection, "quantity": s.cart, "adjacent": s.adjacent}
		} else {
			body["seats"] = run.pick(seats, hot)
		}
		t0 := time.Now()
		status, code, err := run.hold(ctx, event, b, fmt.Sprintf("lg-%d", i), body)
		late.record(i, t0, status)
		mu.Lock()
		outcomes[status]++
		if code != "" {
			codes[code]++
		}
		mu.Unlock()
		if status == http.StatusCreated && hot {
			hotWins.Add(1)
		}
		switch {
		case err != nil:
			return err
		case status == http.StatusCreated || status == http.StatusConflict:
			return nil // a 409 is the right answer for a taken seat
		default:
			return loadgen.StatusError(status)
		}
	})
	holdsTook := time.Since(holdsFrom)
	if bench != nil {
		after, err := bench.measure(ctx)
		if err != nil {
			return err
		}
		r.AddFigure("ceiling", "%s", ceilingFigure(float64(outcomes[http.StatusCreated])/holdsTook.Seconds(), before, after))
	}
	var mix []string
	for _, code := range []int{201, 409, 403, 422, 429, 503} {
		mix = append(mix, fmt.Sprintf("%d:%d", code, outcomes[code]))
	}
	r.AddFigure("outcomes", "%s", strings.Join(mix, " "))
	var refused []string
	for _, code := range slices.Sorted(maps.Keys(codes)) {
		refused = append(refused, fmt.Sprintf("%s:%d", code, codes[code]))
	}
	r.AddFigure("refusals", "%s", strings.Join(refused, " "))
	late.report(r)
	if s.bestSection != "" {
		r.AddFigure("best-available holds", "%d in section %s, %d seats each", hotWins.Load(), s.bestSection, s.cart)
	} else {
		r.AddFigure("hot-seat winners", "%d (at most %d possible)", hotWins.Load(), s.hotSeats/s.cart)
	}
	return run.verify(ctx, event)
}

type bookingRun struct {
	s    *Scenario
	r    *loadgen.Runner
	base string
	// The order the buyers who do not race for the hot seats are dealt
	// the other seats in, and how many were dealt.
	once  sync.Once
	order []int
	dealt atomic.Int64
}

func (run *bookingRun) createEvent(ctx context.Context) (string, []int64, error) {
	secs, err := booking.ParseSections(run.s.sections)
	if err != nil {
		return "", nil, err
	}
	event := fmt.Sprintf("loadgen-%d", time.Now().UnixNano())
	spec := booking.EventSpec{ID: event, Currency: "EUR", StartsAt: time.Now().Add(60 * 24 * time.Hour), Sections: secs}
	if err := run.call(ctx, http.MethodPost, "/v1/admin/events", run.admin(), spec, nil, http.StatusCreated); err != nil {
		return "", nil, fmt.Errorf("create event: %w", err)
	}
	room := map[string]any{"capacity": run.s.buyers, "batch": 1000, "leaseSeconds": 1800, "heartbeatTimeoutSeconds": 600}
	if err := run.call(ctx, http.MethodPut, "/v1/admin/waitingrooms/"+event, run.admin(), room, nil, http.StatusCreated); err != nil {
		return "", nil, fmt.Errorf("create waiting room: %w", err)
	}
	var m booking.SeatMapView
	if err := run.call(ctx, http.MethodGet, "/v1/events/"+event+"/seats", nil, nil, &m, http.StatusOK); err != nil {
		return "", nil, fmt.Errorf("read seat map: %w", err)
	}
	seats := make([]int64, len(m.Seats))
	for i, st := range m.Seats {
		seats[i] = st.ID
	}
	return event, seats, nil
}

// admitAll lets every buyer through the waiting room and keeps their passes.
func (run *bookingRun) admitAll(ctx context.Context, event string) ([]buyer, error) {
	buyers := make([]buyer, run.s.buyers)
	for i := range buyers {
		u := fmt.Sprintf("%s-buyer-%d", event, i)
		tok, err := run.s.secrets.UserToken(u)
		if err != nil {
			return nil, err
		}
		buyers[i] = buyer{user: u, token: tok}
	}
	start := time.Now()
	deadline := time.Now().Add(2 * time.Minute)
	sem := make(chan struct{}, 32)
	for pending := len(buyers); pending > 0; {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d buyers not admitted after 2 minutes: is a worker running?", pending)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		pending = 0
		for i := range buyers {
			if buyers[i].pass != "" {
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func(b *buyer) {
				defer wg.Done()
				defer func() { <-sem }()
				var ans struct {
					State string `json:"state"`
					Pass  string `json:"pass"`
				}
				err := run.call(ctx, http.MethodPost, "/v1/waitingroom/"+event+"/join",
					map[string]string{"Authorization": "Bearer " + b.token}, nil, &ans, http.StatusOK)
				mu.Lock()
				defer mu.Unlock()
				if err == nil && ans.State == "admitted" {
					b.pass = ans.Pass
				} else {
					pending++
				}
			}(&buyers[i])
		}
		wg.Wait()
		if pending > 0 {
			time.Sleep(500 * time.Millisecond)
		}
	}
	run.r.AddFigure("admission", "%d buyers admitted in %s", len(buyers), time.Since(start).Round(time.Millisecond))
	return buyers, nil
}

func (run *bookingRun) pick(seats []int64, hot bool) []int64 {
	cart := make([]int64, 0, run.s.cart)
	pool := seats[run.s.hotSeats:]
	if !hot && len(pool) >= run.s.cart {
		// The other buyers take seats nobody else asked for (a shuffled
		// order, dealt out), so they never race each other: their holds
		// measure an uncontended sale however full it gets. Only once the
		// venue is dealt out do carts overlap.
		run.once.Do(func() {
			run.order = rand.Perm(len(pool))
		})
		from := int(run.dealt.Add(int64(run.s.cart))) - run.s.cart
		for i := 0; i < run.s.cart; i++ {
			cart = append(cart, pool[run.order[(from+i)%len(pool)]])
		}
		return cart
	}
	if hot {
		pool = seats[:run.s.hotSeats]
	}
	for len(cart) < run.s.cart {
		seat := pool[rand.IntN(len(pool))]
		if !slices.Contains(cart, seat) {
			cart = append(cart, seat)
		}
	}
	return cart
}

// hold sends one hold request; it returns the status and, for a refusal,
// the error code of the body.
func (run *bookingRun) hold(ctx context.Context, event string, b buyer, key string, body map[string]any) (int, string, error) {
	raw, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, run.base+"/v1/events/"+event+"/holds", strings.NewReader(string(raw)))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+b.token)
	req.Header.Set(booking.HeaderAdmissionPass, b.pass)
	req.Header.Set(booking.HeaderIdempotencyKey, key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := run.r.Client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 400 {
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, "", nil
	}
	var refusal struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&refusal)
	return resp.StatusCode, refusal.Error.Code, nil
}

func (run *bookingRun) admin() map[string]string {
	return map[string]string{auth.APIKeyHeader: run.s.secrets.APIKey}
}

func (run *bookingRun) call(ctx context.Context, method, path string, hdr map[string]string, in, out any, want int) error {
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = strings.NewReader(string(b))
	}
	req, err := http.NewRequestWithContext(ctx, method, run.base+path, body)
	if err != nil {
		return err
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := run.r.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, strings.TrimSpace(string(raw)))
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// postgres is the server's database: --postgres-url, or the development
// cluster's.
func (s *Scenario) postgres() (string, bool) {
	if s.postgresURL != "" {
		return s.postgresURL, true
	}
	return store.DevPostgresURL(s.secrets.DataDir)
}

// ceiling readies the pgbench runs of --pgbench (nil without it).
func (s *Scenario) ceiling(ctx context.Context) (*ceiling, error) {
	if s.pgbench == "" {
		return nil, nil
	}
	bin, err := resolvePgbench(s.pgbench, exec.LookPath)
	if err != nil {
		return nil, err
	}
	dsn, ok := s.postgres()
	if !ok {
		return nil, fmt.Errorf("--pgbench needs --postgres-url or a development cluster in %s", s.secrets.DataDir)
	}
	u, err := pgbenchDatabaseURL(dsn, s.pgbenchDB)
	if err != nil {
		return nil, err
	}
	c := &ceiling{bin: bin, url: u}
	return c, c.prepare(ctx, dsn, s.pgbenchDB)
}

// verify checks in SQL that no seat of the event has two live owners and
// that every taken seat names its live item.
func (run *bookingRun) verify(ctx context.Context, event string) error {
	dsn, ok := run.s.postgres()
	if !ok {
		run.r.AddFigure("ownership check", "skipped: no --postgres-url and no development cluster in %s", run.s.secrets.DataDir)
		return nil
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("ownership check: %w", err)
	}
	defer conn.Close(ctx)
	var doubled, orphaned, held, split int
	err = conn.QueryRow(ctx, `
SELECT
  (SELECT count(*) FROM (SELECT i.seat_id FROM reservation_items i JOIN seats s ON s.id = i.seat_id
     WHERE s.event_id = $1 AND i.status IN ('HELD','SOLD','CHECKED_IN') GROUP BY i.seat_id HAVING count(*) > 1) d),
  (SELECT count(*) FROM seats s LEFT JOIN reservation_items i
     ON i.seat_id = s.id AND i.reservation_id = s.reservation_id AND i.status IN ('HELD','SOLD')
     WHERE s.event_id = $1 AND s.status IN ('HELD','SOLD') AND i.id IS NULL),
  (SELECT count(*) FROM seats WHERE event_id = $1 AND status = 'HELD'),
  (SELECT count(*) FROM (SELECT i.reservation_id FROM reservation_items i JOIN seats s ON s.id = i.seat_id
     WHERE s.event_id = $1 AND i.status = 'HELD' GROUP BY i.reservation_id
     HAVING count(DISTINCT (s.section_id, s.row_num)) > 1 OR max(s.seat_num) - min(s.seat_num) <> count(*) - 1) x)`,
		event).Scan(&doubled, &orphaned, &held, &split)
	if err != nil {
		return fmt.Errorf("ownership check: %w", err)
	}
	run.r.AddFigure("ownership check", "%d seats held, %d with two live owners, %d taken without their item", held, doubled, orphaned)
	if run.s.bestSection != "" && run.s.adjacent && run.s.hotFraction >= 1 {
		run.r.AddFigure("adjacency check", "%d holds whose seats are not one run of one row", split)
		if split > 0 {
			return fmt.Errorf("adjacency check failed: %d holds not side by side", split)
		}
	}
	if doubled > 0 || orphaned > 0 {
		return fmt.Errorf("ownership check failed: %d double-owned, %d orphaned seats", doubled, orphaned)
	}
	return nil
}
