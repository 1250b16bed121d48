// Package stays is `presenced loadgen stays`: guests searching the demo
// cities for hotels and holding rooms for stays of a few nights, on the
// booking wire protocol, with a check in SQL that no night is overbooked.
package stays

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/pflag"

	"github.com/presenced/presenced/booking"
	"github.com/presenced/presenced/loadgen"
	"github.com/presenced/presenced/store"
)

// Scenario is `presenced loadgen stays`: every operation is a search of a
// random city and stay, or (a share of them) a hold of a room type the
// search offered, by a guest of its own. At the end it checks in SQL that
// no night of the cities' hotels has more rooms promised than exist and
// that the counters agree with the stays.
type Scenario struct {
	secrets     loadgen.Secrets
	cities      string
	holdShare   float64
	horizon     int
	maxNights   int
	postgresURL string
}

// New returns the stays load scenario.
func New() *Scenario { return &Scenario{} }

func (s *Scenario) Name() string { return "stays" }

func (s *Scenario) Describe() string {
	return "guests search the demo cities and hold rooms for stays; holds/s, search p99, and a zero-overbooking check in SQL"
}

func (s *Scenario) Flags(fs *pflag.FlagSet) {
	s.secrets.AddFlags(fs)
	fs.StringVar(&s.cities, "cities", "lisbon,paris,rome,berlin,oslo,prague", "cities to search (run presenced demo first)")
	fs.Float64Var(&s.holdShare, "hold-share", 0.3, "share of operations that hold a room after searching")
	fs.IntVar(&s.horizon, "horizon", 14, "stays start within this many days from today (fewer: more contention)")
	fs.IntVar(&s.maxNights, "max-nights", 4, "longest stay in nights")
	fs.StringVar(&s.postgresURL, "postgres-url", "", "database to check for overbooking (default: the development cluster under --data-dir)")
}

// tally is what the run counts besides the frame's histogram.
type tally struct {
	mu       sync.Mutex
	search   loadgen.Histogram
	hold     loadgen.Histogram
	outcomes map[int]int
	holds    atomic.Int64
	found    atomic.Int64 // searches that found at least one hotel
	searches atomic.Int64
}

func (s *Scenario) Run(ctx context.Context, r *loadgen.Runner) error {
	if err := s.secrets.Resolve(); err != nil {
		return err
	}
	cities := strings.Split(s.cities, ",")
	if s.holdShare < 0 || s.holdShare > 1 || s.horizon < 1 || s.maxNights < 1 || s.maxNights > 30 || len(cities) == 0 {
		return errors.New("--hold-share must be 0 to 1, --horizon positive, --max-nights 1 to 30, --cities not empty")
	}
	run := &staysRun{s: s, r: r, base: strings.TrimRight(r.Options.Target, "/"), tag: fmt.Sprintf("lg%d", time.Now().UnixNano()),
		cities: cities, t: &tally{outcomes: map[int]int{}}}
	if err := run.probe(ctx); err != nil {
		return err
	}
	r.Label("ops")
	r.StartClock()
	var seq atomic.Int64
	r.Loop(ctx, func(ctx context.Context, _ int) error { return run.op(ctx, seq.Add(1)) })
	elapsed := r.Elapsed()
	t := run.t
	t.mu.Lock()
	r.AddFigure("searches", "%d (%.0f/s), %d found hotels; p50 %s p99 %s max %s", t.searches.Load(),
		float64(t.searches.Load())/elapsed.Seconds(), t.found.Load(), t.search.Quantile(0.5), t.search.Quantile(0.99), t.search.Max())
	var mix []string
	for _, code := range []int{201, 409, 422, 429, 503} {
		mix = append(mix, fmt.Sprintf("%d:%d", code, t.outcomes[code]))
	}
	r.AddFigure("holds", "%d (%.0f/s) %s; p50 %s p99 %s", t.holds.Load(), float64(t.holds.Load())/elapsed.Seconds(),
		strings.Join(mix, " "), t.hold.Quantile(0.5), t.hold.Quantile(0.99))
	t.mu.Unlock()
	return run.verify(ctx)
}

type staysRun struct {
	s      *Scenario
	r      *loadgen.Runner
	base   string
	tag    string
	cities []string
	t      *tally
}

// probe checks that the cities have hotels before loading them.
func (run *staysRun) probe(ctx context.Context) error {
	in := time.Now().AddDate(0, 0, 1)
	for _, city := range run.cities {
		var res booking.SearchResult
		if _, err := run.search(ctx, city, in, in.AddDate(0, 0, 1), &res); err != nil {
			return fmt.Errorf("search %s: %w", city, err)
		}
		if len(res.Hotels) == 0 {
			return fmt.Errorf("city %s has no hotel with a free room tomorrow: run `presenced demo` first", city)
		}
	}
	return nil
}

// op is one guest: a search, and for a share of them a hold of an offered
// room type (a 409 is a right answer when another guest was faster).
func (run *staysRun) op(ctx context.Context, n int64) error {
	city := run.cities[rand.IntN(len(run.cities))]
	in := time.Now().AddDate(0, 0, 1+rand.IntN(run.s.horizon))
	out := in.AddDate(0, 0, 1+rand.IntN(run.s.maxNights))
	var res booking.SearchResult
	d, err := run.search(ctx, city, in, out, &res)
	if err != nil {
		return err
	}
	run.t.searches.Add(1)
	run.t.mu.Lock()
	run.t.search.Record(d)
	run.t.mu.Unlock()
	if len(res.Hotels) == 0 {
		return nil
	}
	run.t.found.Add(1)
	if rand.Float64() >= run.s.holdShare {
		return nil
	}
	h := res.Hotels[rand.IntN(len(res.Hotels))]
	rt := h.RoomTypes[rand.IntN(len(h.RoomTypes))]
	status, d, err := run.hold(ctx, fmt.Sprintf("%s-guest-%d", run.tag, n), h.ID, booking.StayHoldRequest{
		RoomType: rt.ID, CheckIn: res.CheckIn, CheckOut: res.CheckOut, Rooms: 1, Guests: 1})
	if err != nil {
		return err
	}
	run.t.holds.Add(1)
	run.t.mu.Lock()
	run.t.hold.Record(d)
	run.t.outcomes[status]++
	run.t.mu.Unlock()
	if status != http.StatusCreated && status != http.StatusConflict {
		return loadgen.StatusError(status)
	}
	return nil
}

func (run *staysRun) search(ctx context.Context, city string, in, out time.Time, res *booking.SearchResult) (time.Duration, error) {
	url := fmt.Sprintf("%s/v1/hotels?city=%s&checkIn=%s&checkOut=%s", run.base, city, in.Format("2006-01-02"), out.Format("2006-01-02"))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	resp, err := run.r.Client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	d := time.Since(start)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, loadgen.StatusError(resp.StatusCode)
	}
	return d, json.Unmarshal(raw, res)
}

func (run *staysRun) hold(ctx context.Context, user, hotel string, body booking.StayHoldRequest) (int, time.Duration, error) {
	tok, err := run.s.secrets.UserToken(user)
	if err != nil {
		return 0, 0, err
	}
	raw, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, run.base+"/v1/hotels/"+hotel+"/holds", strings.NewReader(string(raw)))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set(booking.HeaderIdempotencyKey, user)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := run.r.Client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, time.Since(start), nil
}

// verify checks in SQL, over every hotel of the cities, that no night has
// more rooms promised than exist and that each night's counters equal the
// rooms of its pending and paid stays.
func (run *staysRun) verify(ctx context.Context) error {
	dsn := run.s.postgresURL
	if dsn == "" {
		var ok bool
		if dsn, ok = store.DevPostgresURL(run.s.secrets.DataDir); !ok {
			run.r.AddFigure("overbooking check", "skipped: no --postgres-url and no development cluster in %s", run.s.secrets.DataDir)
			return nil
		}
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("overbooking check: %w", err)
	}
	defer conn.Close(ctx)
	var nights, overbooked, drift, held int
	err = conn.QueryRow(ctx, `
WITH scope AS (
  SELECT rn.* FROM room_nights rn JOIN hotels h ON h.id = rn.hotel_id WHERE h.city = ANY($1)
), truth AS (
  SELECT n.hotel_id, n.room_type_id, n.night,
         sum(n.rooms) FILTER (WHERE r.status = 'PENDING_PAYMENT') AS held,
         sum(n.rooms) FILTER (WHERE r.status = 'PAID') AS sold
  FROM stay_nights n JOIN reservations r ON r.id = n.reservation_id
  JOIN hotels h ON h.id = n.hotel_id WHERE h.city = ANY($1)
  GROUP BY n.hotel_id, n.room_type_id, n.night
)
SELECT
  (SELECT count(*) FROM scope),
  (SELECT count(*) FROM scope WHERE held + sold > total),
  (SELECT count(*) FROM scope s LEFT JOIN truth t USING (hotel_id, room_type_id, night)
     WHERE s.held <> coalesce(t.held, 0) OR s.sold <> coalesce(t.sold, 0)),
  (SELECT coalesce(sum(held), 0) FROM scope)`, run.cities).Scan(&nights, &overbooked, &drift, &held)
	if err != nil {
		return fmt.Errorf("overbooking check: %w", err)
	}
	run.r.AddFigure("overbooking check", "%d room nights, %d rooms held now, %d overbooked, %d whose counters disagree with their stays",
		nights, held, overbooked, drift)
	if overbooked > 0 || drift > 0 {
		return fmt.Errorf("overbooking check failed: %d overbooked nights, %d with drifting counters", overbooked, drift)
	}
	return nil
}
