// Package payments is `presenced loadgen sale`: fans join the waiting room,
// are admitted, hold seats, pay through the sandbox PSP with a mix of its
// faults, and wait for their tickets; the run ends with SQL checks (no
// double charge, no double sale) and `presenced check`.
package payments

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/pflag"

	"github.com/presenced/presenced/booking"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/loadgen"
	"github.com/presenced/presenced/payments"
	"github.com/presenced/presenced/store"
)

// Scenario is the sale: one order per fan.
type Scenario struct {
	secrets     loadgen.Secrets
	fans        int
	seats       int
	cart        int
	faultRate   float64
	faults      string
	postgresURL string
	// Check runs `presenced check`; nil runs this binary's check command.
	Check func(ctx context.Context) error
	event string
}

// New returns the sale scenario.
func New() *Scenario { return &Scenario{} }

func (s *Scenario) Name() string { return "sale" }

func (s *Scenario) Describe() string {
	return "fans join, are admitted, hold, pay through the sandbox with faults and get tickets; orders/s, webhooks/s, relay lag, double charges and sales"
}

func (s *Scenario) Flags(fs *pflag.FlagSet) {
	s.secrets.AddFlags(fs)
	fs.IntVar(&s.fans, "fans", 500, "fans, one order each")
	fs.IntVar(&s.seats, "seats", 400, "seats of the generated event (fewer than fans: some find them taken)")
	fs.IntVar(&s.cart, "cart", 2, "seats per order (1-6)")
	fs.Float64Var(&s.faultRate, "fault-rate", 0.3, "share of payments confirmed with a sandbox fault")
	fs.StringVar(&s.faults, "faults", "webhook_twice,webhook_x100,webhook_out_of_order,webhook_wrong_amount",
		"sandbox faults drawn from for faulty payments")
	fs.StringVar(&s.postgresURL, "postgres-url", "", "database to check (default: the development cluster under --data-dir)")
}

// outcomes of one fan's order.
const (
	outTickets = "tickets"
	outTaken   = "seats_taken"
	outRefund  = "refunded"
)

func (s *Scenario) Run(ctx context.Context, r *loadgen.Runner) error {
	if err := s.secrets.Resolve(); err != nil {
		return err
	}
	if s.fans < 1 || s.seats < 1 || s.cart < 1 || s.cart > 6 || s.faultRate < 0 || s.faultRate > 1 {
		return errors.New("--fans, --seats positive; --cart 1-6; --fault-rate 0-1")
	}
	faults := strings.Split(s.faults, ",")
	run := &saleRun{s: s, r: r, base: strings.TrimRight(r.Options.Target, "/")}
	if err := run.createEvent(ctx); err != nil {
		return err
	}
	webhooksBefore := run.webhooks(ctx)
	start := time.Now()
	r.Label("orders")
	r.StartClock()
	if r.Options.Requests == 0 || r.Options.Requests > int64(s.fans) {
		r.Options.Requests = int64(s.fans)
	}
	var next atomic.Int64
	var mu sync.Mutex
	outcomes := map[string]int{}
	r.Loop(ctx, func(ctx context.Context, _ int) error {
		i := int(next.Add(1) - 1)
		var fault string
		if rand.Float64() < s.faultRate && len(faults) > 0 {
			fault = faults[rand.IntN(len(faults))]
		}
		out, err := run.order(ctx, i, fault)
		mu.Lock()
		outcomes[out]++
		mu.Unlock()
		return err
	})
	elapsed := time.Since(start)
	var mix []string
	for _, k := range []string{outTickets, outTaken, outRefund, ""} {
		if outcomes[k] > 0 || k != "" {
			name := k
			if name == "" {
				name = "failed"
			}
			mix = append(mix, fmt.Sprintf("%s:%d", name, outcomes[k]))
		}
	}
	r.AddFigure("outcomes", "%s", strings.Join(mix, " "))
	r.AddFigure("orders/s end to end", "%.1f (orders with tickets / run time)", float64(outcomes[outTickets])/elapsed.Seconds())
	if after := run.webhooks(ctx); after >= webhooksBefore && webhooksBefore >= 0 {
		r.AddFigure("webhooks/s", "%.1f (%d deliveries, duplicates included)", float64(after-webhooksBefore)/elapsed.Seconds(), after-webhooksBefore)
	}
	return run.verify(ctx, start)
}

type saleRun struct {
	s     *Scenario
	r     *loadgen.Runner
	base  string
	pool  []int64
	taken atomic.Int64
}

func (run *saleRun) createEvent(ctx context.Context) error {
	perRow := min(run.s.seats, 100)
	rows := (run.s.seats + perRow - 1) / perRow
	run.s.event = fmt.Sprintf("sale-%d", time.Now().UnixNano())
	spec := booking.EventSpec{ID: run.s.event, Currency: "EUR", StartsAt: time.Now().Add(60 * 24 * time.Hour),
		Sections: []booking.SectionSpec{{ID: "A", Rows: rows, SeatsPerRow: perRow, BasePrice: 4500}}}
	if err := run.call(ctx, http.MethodPost, "/v1/admin/events", run.admin(), spec, nil, http.StatusCreated); err != nil {
		return fmt.Errorf("create event: %w", err)
	}
	room := map[string]any{"capacity": run.s.fans, "batch": 1000, "leaseSeconds": 1800, "heartbeatTimeoutSeconds": 600}
	if err := run.call(ctx, http.MethodPut, "/v1/admin/waitingrooms/"+run.s.event, run.admin(), room, nil, http.StatusCreated); err != nil {
		return fmt.Errorf("create waiting room: %w", err)
	}
	var m booking.SeatMapView
	if err := run.call(ctx, http.MethodGet, "/v1/events/"+run.s.event+"/seats", nil, nil, &m, http.StatusOK); err != nil {
		return fmt.Errorf("read seat map: %w", err)
	}
	for _, st := range m.Seats {
		run.pool = append(run.pool, st.ID)
	}
	rand.Shuffle(len(run.pool), func(i, j int) { run.pool[i], run.pool[j] = run.pool[j], run.pool[i] })
	return nil
}

// cart takes the next unclaimed seats, or random ones once they run out
// (those fans find them taken: a 409 is the right answer).
func (run *saleRun) cart() []int64 {
	n := int(run.taken.Add(int64(run.s.cart)))
	if n <= len(run.pool) {
		return run.pool[n-run.s.cart : n]
	}
	out := make([]int64, 0, run.s.cart)
	for len(out) < run.s.cart {
		seat := run.pool[rand.IntN(len(run.pool))]
		if !containsSeat(out, seat) {
			out = append(out, seat)
		}
	}
	return out
}

func containsSeat(list []int64, s int64) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// order is one fan's journey, timed as one operation.
func (run *saleRun) order(ctx context.Context, i int, fault string) (string, error) {
	user := fmt.Sprintf("%s-fan-%d", run.s.event, i)
	tok, err := run.s.secrets.UserToken(user)
	if err != nil {
		return "", err
	}
	authz := map[string]string{"Authorization": "Bearer " + tok}
	var pass string
	for pass == "" {
		var ans struct {
			State string `json:"state"`
			Pass  string `json:"pass"`
		}
		if err := run.call(ctx, http.MethodPost, "/v1/waitingroom/"+run.s.event+"/join", authz, nil, &ans, http.StatusOK); err != nil {
			return "", fmt.Errorf("join: %w", err)
		}
		if ans.State == "admitted" {
			pass = ans.Pass
			break
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return "", err
		}
	}
	hold := map[string]string{"Authorization": "Bearer " + tok, booking.HeaderAdmissionPass: pass, booking.HeaderIdempotencyKey: "h-" + user}
	var res booking.Reservation
	status, err := run.try(ctx, http.MethodPost, "/v1/events/"+run.s.event+"/holds", hold, map[string]any{"seats": run.cart()}, &res)
	if err != nil {
		return "", fmt.Errorf("hold: %w", err)
	}
	if status == http.StatusConflict {
		return outTaken, nil
	}
	if status != http.StatusCreated {
		return "", loadgen.StatusError(status)
	}
	pay := map[string]string{"Authorization": "Bearer " + tok, payments.HeaderIdempotencyKey: "p-" + user}
	var v payments.PaymentView
	for attempt := 0; ; attempt++ {
		status, err = run.try(ctx, http.MethodPost, "/v1/reservations/"+res.ID+"/payments", pay, nil, &v)
		if err != nil {
			return "", fmt.Errorf("pay: %w", err)
		}
		if status == http.StatusCreated {
			break
		}
		if status != http.StatusServiceUnavailable || attempt == 5 {
			return "", loadgen.StatusError(status)
		}
		// The same key: the same payment and intent.
		if err := sleep(ctx, time.Duration(100<<attempt)*time.Millisecond); err != nil {
			return "", err
		}
	}
	confirm := payments.SandboxConfirm{ClientSecret: v.ClientSecret}
	if fault != "" {
		confirm.Faults = []string{fault}
	}
	if err := run.call(ctx, http.MethodPost, v.ConfirmURL, nil, confirm, nil, http.StatusOK); err != nil {
		return "", fmt.Errorf("confirm: %w", err)
	}
	if fault == "webhook_wrong_amount" {
		return outRefund, nil // never sold; the refund is checked at the end
	}
	for {
		var list payments.TicketList
		if err := run.call(ctx, http.MethodGet, "/v1/tickets", authz, nil, &list, http.StatusOK); err != nil {
			return "", fmt.Errorf("tickets: %w", err)
		}
		if len(list.Tickets) >= len(res.Items) {
			return outTickets, nil
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return "", err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func (run *saleRun) admin() map[string]string {
	return map[string]string{auth.APIKeyHeader: run.s.secrets.APIKey}
}

// try makes a call and returns its status, decoding a 2xx body into out.
func (run *saleRun) try(ctx context.Context, method, path string, hdr map[string]string, in, out any) (int, error) {
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = strings.NewReader(string(b))
	}
	req, err := http.NewRequestWithContext(ctx, method, run.base+path, body)
	if err != nil {
		return 0, err
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := run.r.Client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 == 2 && out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, err
		}
	}
	return resp.StatusCode, nil
}

func (run *saleRun) call(ctx context.Context, method, path string, hdr map[string]string, in, out any, want int) error {
	status, err := run.try(ctx, method, path, hdr, in, out)
	if err != nil {
		return err
	}
	if status != want {
		return fmt.Errorf("%s %s: %d", method, path, status)
	}
	return nil
}

// webhooks reads the server's webhook counter (-1 when unavailable).
func (run *saleRun) webhooks(ctx context.Context) int64 {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, run.base+"/metrics", nil)
	if err != nil {
		return -1
	}
	resp, err := run.r.Client.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var total float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "presenced_payments_webhooks_total{") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			total += v
		}
	}
	return int64(total)
}

// verify waits for refunds to settle, then checks in SQL: no reservation
// charged twice, no charge left unpaid and unrefunded, no seat sold twice;
// and reports the relay lag. It ends with `presenced check`.
func (run *saleRun) verify(ctx context.Context, start time.Time) error {
	dsn := run.s.postgresURL
	if dsn == "" {
		var ok bool
		if dsn, ok = store.DevPostgresURL(run.s.secrets.DataDir); !ok {
			run.r.AddFigure("checks", "skipped: no --postgres-url and no development cluster in %s", run.s.secrets.DataDir)
			return nil
		}
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("checks: %w", err)
	}
	defer conn.Close(ctx)
	const charges = `
WITH i AS (SELECT s.*, r.status AS res_status FROM sandbox_intents s JOIN reservations r ON r.id::text = s.metadata->>'reservation_id'
           WHERE r.event_id = $1 AND s.charged_at IS NOT NULL)
SELECT (SELECT count(*) FROM i),
       (SELECT count(*) FROM (SELECT metadata->>'reservation_id' FROM i WHERE NOT EXISTS (SELECT 1 FROM sandbox_refunds f WHERE f.intent_id = i.id)
                               GROUP BY 1 HAVING count(*) > 1) d),
       (SELECT count(*) FROM i WHERE res_status <> 'PAID' AND NOT EXISTS (SELECT 1 FROM sandbox_refunds f WHERE f.intent_id = i.id)),
       (SELECT count(*) FROM sandbox_refunds f JOIN i ON i.id = f.intent_id)`
	var charged, doubleCharged, unresolved, refunds int64
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := conn.QueryRow(ctx, charges, run.s.event).Scan(&charged, &doubleCharged, &unresolved, &refunds); err != nil {
			return fmt.Errorf("charge check: %w", err)
		}
		if unresolved == 0 || time.Now().After(deadline) {
			break
		}
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
	var doubleSold, paidNoTickets int64
	if err := conn.QueryRow(ctx, `
SELECT (SELECT count(*) FROM (SELECT i.seat_id FROM reservation_items i JOIN seats s ON s.id = i.seat_id
          WHERE s.event_id = $1 AND i.status IN ('HELD','SOLD','CHECKED_IN') GROUP BY i.seat_id HAVING count(*) > 1) d),
       (SELECT count(*) FROM reservations r WHERE r.event_id = $1 AND r.status = 'PAID'
          AND NOT EXISTS (SELECT 1 FROM tickets t WHERE t.reservation_id = r.id))`, run.s.event).Scan(&doubleSold, &paidNoTickets); err != nil {
		return fmt.Errorf("sale check: %w", err)
	}
	var lagP99, lagMax *float64
	if err := conn.QueryRow(ctx, `
SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM published_at - created_at)),
       max(extract(epoch FROM published_at - created_at))
FROM outbox WHERE created_at >= $1 AND published_at IS NOT NULL`, start).Scan(&lagP99, &lagMax); err != nil {
		return fmt.Errorf("relay lag: %w", err)
	}
	if lagP99 != nil {
		run.r.AddFigure("relay lag", "p99 %.0f ms, max %.0f ms (outbox commit to stream)", *lagP99*1000, *lagMax*1000)
	}
	run.r.AddFigure("charges", "%d charged, %d refunded, %d double charges, %d charged and neither sold nor refunded", charged, refunds, doubleCharged, unresolved)
	run.r.AddFigure("sales", "%d seats sold twice, %d paid orders without tickets", doubleSold, paidNoTickets)
	if doubleCharged > 0 || unresolved > 0 || doubleSold > 0 || paidNoTickets > 0 {
		return fmt.Errorf("money check failed: %d double charges, %d unresolved charges, %d double sales, %d paid without tickets",
			doubleCharged, unresolved, doubleSold, paidNoTickets)
	}
	check := run.s.Check
	if check == nil {
		check = func(ctx context.Context) error { return runCheck(ctx, run.s.secrets.DataDir, run.s.postgresURL) }
	}
	if err := check(ctx); err != nil {
		run.r.AddFigure("presenced check", "FAILED: %v", err)
		return err
	}
	run.r.AddFigure("presenced check", "every monitor reads 0")
	return nil
}

// runCheck runs this binary's `presenced check`.
func runCheck(ctx context.Context, dataDir, dsn string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{"check", "--data-dir", dataDir}
	if dsn != "" {
		args = append(args, "--postgres-url", dsn)
	}
	out, err := exec.CommandContext(ctx, self, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
