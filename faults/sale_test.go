package faults_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/booking"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/payments"
)

// sale is a booking load whose every seat operation is recorded in a
// history: buyers join the line, hold one or two random seats, then pay
// (one hold in five) or cancel, retrying a 503 or a lost answer with the
// same Idempotency-Key until the answer is definitive.
type sale struct {
	t      *testing.T
	base   func() string // the plane buyers talk to
	apiKey string
	secret string
	event  string
	seats  []int64
	db     *pgxpool.Pool
	hist   *history
	buyers []*saleBuyer

	mu       sync.Mutex
	statuses map[int]int
	bad      []string // 500s, 5xx other than 503, 503 without Retry-After, unexpected answers
	paid     []string // reservations paid
	// releasedByPayments counts holds a payment start released because
	// every provider was failing.
	releasedByPayments int
	// after is when a fault ended; firstHold the first 201 after it.
	after, firstHold time.Time
	// slowest is the longest wait for one answer since the last tally.
	slowest     time.Duration
	slowestWhat string
	unsettle    []string // operations that never got a definitive answer
}

type saleBuyer struct {
	id          int
	user, token string
	pass        string
	n           int
}

func newSale(t *testing.T, base func() string, apiKey, secret, event string, db *pgxpool.Pool, buyers int) *sale {
	s := &sale{t: t, base: base, apiKey: apiKey, secret: secret, event: event, db: db, hist: newHistory(), statuses: map[int]int{}}
	for i := 0; i < buyers; i++ {
		u := fmt.Sprintf("%s-buyer-%d", event, i)
		tok, err := auth.SignDev(secret, u, 4*time.Hour, nil, "", "")
		require.NoError(t, err)
		s.buyers = append(s.buyers, &saleBuyer{id: i, user: u, token: tok})
	}
	return s
}

// create makes a new event (rows × 30 seats) and its waiting room, and
// moves the buyers to it: each fault gets a sale of its own, so seats sold
// before do not turn its holds into refusals.
func (s *sale) create(event string, rows int) {
	t := s.t
	s.event, s.seats = event, nil
	for _, b := range s.buyers {
		b.pass = ""
	}
	admin := map[string]string{auth.APIKeyHeader: s.apiKey}
	a := do("POST", s.base()+"/v1/admin/events", admin, fmt.Sprintf(`{"id":%q,"currency":"EUR","startsAt":"2031-01-01T20:00:00Z","sections":[{"id":"A","rows":%d,"seatsPerRow":30,"basePrice":1000}]}`, s.event, rows))
	require.Equal(t, 201, a.code, "%s", a.body)
	a = do("PUT", s.base()+"/v1/admin/waitingrooms/"+s.event, admin, `{"capacity":1000,"batch":100,"leaseSeconds":1800,"heartbeatTimeoutSeconds":600}`)
	require.Contains(t, []int{200, 201}, a.code, "%s", a.body)
	rowsQ, err := s.db.Query(context.Background(), `SELECT id FROM seats WHERE event_id = $1 ORDER BY id`, s.event)
	require.NoError(t, err)
	for rowsQ.Next() {
		var id int64
		require.NoError(t, rowsQ.Scan(&id))
		s.seats = append(s.seats, id)
	}
	require.NoError(t, rowsQ.Err())
}

// maxWait bounds the wait for one answer during any fault.
const maxWait = 20 * time.Second

// note counts an answer and keeps what breaks the drill's rules: no 500,
// every 5xx a 503 with Retry-After.
func (s *sale) note(what string, a answer, allowed ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a.took > s.slowest {
		s.slowest, s.slowestWhat = a.took, fmt.Sprintf("%s %d", what, a.code)
	}
	// The plane itself is never down in these drills: every call gets an
	// answer, and within the longest client deadline of the server (a hold
	// waits for a writer at most 2 × (statement_timeout + lock_timeout) =
	// 14 s) plus slack.
	if a.err != nil {
		s.bad = append(s.bad, fmt.Sprintf("%s: no answer after %s: %v", what, a.took.Round(time.Millisecond), a.err))
		return
	}
	if a.took > maxWait {
		s.bad = append(s.bad, fmt.Sprintf("%s: answered %d after %s", what, a.code, a.took.Round(time.Millisecond)))
	}
	s.statuses[a.code]++
	if what == "hold" && a.code == http.StatusCreated && !s.after.IsZero() && s.firstHold.IsZero() {
		s.firstHold = time.Now()
	}
	switch {
	case a.code >= 500 && (a.code != http.StatusServiceUnavailable || a.retryAfter == ""):
		s.bad = append(s.bad, fmt.Sprintf("%s: %d (Retry-After %q) %s", what, a.code, a.retryAfter, a.body))
	case a.code == http.StatusServiceUnavailable:
	default:
		for _, c := range allowed {
			if a.code == c {
				return
			}
		}
		s.bad = append(s.bad, fmt.Sprintf("%s: unexpected %d %s", what, a.code, a.body))
	}
}

// definitive retries call while it answers 503 or nothing, waiting as
// Retry-After says (capped, to keep the drill short), for up to a minute.
func (s *sale) definitive(what string, call func() answer, allowed ...int) (answer, bool) {
	deadline := time.Now().Add(time.Minute)
	for {
		a := call()
		s.note(what, a, allowed...)
		if a.err == nil && (a.code != http.StatusServiceUnavailable || errorCode(a) == payments.CodeProvidersUnavailable) {
			return a, true
		}
		if time.Now().After(deadline) {
			s.mu.Lock()
			s.unsettle = append(s.unsettle, what)
			s.mu.Unlock()
			return a, false
		}
		time.Sleep(time.Duration(100+rand.IntN(200)) * time.Millisecond)
	}
}

func (s *sale) userHdr(b *saleBuyer) map[string]string {
	return map[string]string{"Authorization": "Bearer " + b.token, "Content-Type": "application/json"}
}

// admit joins the line until admitted.
func (s *sale) admit(b *saleBuyer, stop <-chan struct{}) bool {
	for {
		a := do("POST", s.base()+"/v1/waitingroom/"+s.event+"/join", s.userHdr(b), "")
		s.note("join", a, 200)
		var st struct{ State, Pass string }
		if a.err == nil && a.code == 200 && json.Unmarshal(a.body, &st) == nil && st.State == "admitted" {
			b.pass = st.Pass
			return true
		}
		select {
		case <-stop:
			return false
		case <-time.After(time.Duration(100+rand.IntN(200)) * time.Millisecond):
		}
	}
}

// run starts every buyer until stop; the returned group ends once each
// buyer's operation in flight has its definitive answer.
func (s *sale) run(stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, b := range s.buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if b.pass == "" && !s.admit(b, stop) {
					return
				}
				s.round(b)
			}
		}()
	}
	return &wg
}

// round is one hold, then a payment or a cancel.
func (s *sale) round(b *saleBuyer) {
	b.n++
	seats := []int64{s.seats[rand.IntN(len(s.seats))]}
	if rand.IntN(2) == 0 {
		if other := s.seats[rand.IntN(len(s.seats))]; other != seats[0] {
			seats = append(seats, other)
		}
	}
	body, _ := json.Marshal(map[string]any{"seats": seats})
	hdr := s.userHdr(b)
	hdr[booking.HeaderAdmissionPass] = b.pass
	hdr[booking.HeaderIdempotencyKey] = fmt.Sprintf("%s-h%d", b.user, b.n)
	call := s.hist.now()
	a, ok := s.definitive("hold", func() answer {
		return do("POST", s.base()+"/v1/events/"+s.event+"/holds", hdr, string(body))
	}, 201, 409, 403, 429)
	ret := s.hist.now()
	if !ok {
		return // never settled: counted in unsettle
	}
	var r booking.Reservation
	if a.code != http.StatusCreated || json.Unmarshal(a.body, &r) != nil || r.ID == "" {
		s.hist.add(b.id, seats, seatInput{Kind: "hold"}, seatOutput{}, call, ret)
		if a.code == http.StatusForbidden {
			b.pass = "" // the lease ended: back through the line
		}
		time.Sleep(time.Duration(20+rand.IntN(30)) * time.Millisecond) // a person picks other seats
		return
	}
	s.hist.add(b.id, seats, seatInput{Kind: "hold", Res: r.ID}, seatOutput{OK: true}, call, ret)

	if rand.IntN(5) == 0 && s.pay(b, r.ID, seats) {
		b.pass = "" // a paid checkout ends the admission
		return
	}
	call = s.hist.now()
	a, ok = s.definitive("cancel", func() answer {
		return do("DELETE", s.base()+"/v1/reservations/"+r.ID, s.userHdr(b), "")
	}, 200, 409)
	ret = s.hist.now()
	if ok {
		s.hist.add(b.id, seats, seatInput{Kind: "release", Res: r.ID}, seatOutput{OK: a.code == 200}, call, ret)
	}
	b.pass = "" // the cancel ended the admission lease
}

// pay starts a payment and confirms it at the sandbox provider. A start
// answered 503 providers_unavailable released the hold (every provider's
// breaker open): that is a release of its seats, and the end of the round.
func (s *sale) pay(b *saleBuyer, reservation string, seats []int64) bool {
	hdr := s.userHdr(b)
	hdr[payments.HeaderIdempotencyKey] = fmt.Sprintf("%s-p%d", b.user, b.n)
	call := s.hist.now()
	a, ok := s.definitive("payment", func() answer {
		return do("POST", s.base()+"/v1/reservations/"+reservation+"/payments", hdr, "")
	}, 200, 201, 409)
	if ok && a.code == http.StatusServiceUnavailable {
		s.hist.add(b.id, seats, seatInput{Kind: "release", Res: reservation}, seatOutput{OK: true}, call, s.hist.now())
		s.mu.Lock()
		s.releasedByPayments++
		s.mu.Unlock()
		return true
	}
	var v payments.PaymentView
	if !ok || (a.code != 200 && a.code != 201) || json.Unmarshal(a.body, &v) != nil || v.ConfirmURL == "" {
		return false
	}
	confirm, _ := json.Marshal(payments.SandboxConfirm{ClientSecret: v.ClientSecret})
	a, ok = s.definitive("confirm", func() answer {
		return do("POST", s.base()+v.ConfirmURL, map[string]string{"Content-Type": "application/json"}, string(confirm))
	}, 200)
	if ok && a.code == 200 {
		s.mu.Lock()
		s.paid = append(s.paid, reservation)
		s.mu.Unlock()
		return true
	}
	return false
}

// faultEnded starts the clock of the recovery: recovered says how long
// after it the first hold was granted.
func (s *sale) faultEnded() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.after, s.firstHold = time.Now(), time.Time{}
}

func (s *sale) recovered() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	slowest := fmt.Sprintf("slowest answer %.1f s (%s)", s.slowest.Seconds(), s.slowestWhat)
	s.slowest, s.slowestWhat = 0, ""
	if s.firstHold.IsZero() {
		return "no hold granted after it; " + slowest
	}
	return fmt.Sprintf("first 201 %.1f s after; %s", s.firstHold.Sub(s.after).Seconds(), slowest)
}

// readOwners records reads of random seats' live owner from the system of
// record until stop.
func (s *sale) readOwners(stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			s.readOwner(s.seats[rand.IntN(len(s.seats))])
		}
	}()
	return &wg
}

func (s *sale) readOwner(seat int64) {
	call := s.hist.now()
	var owners []string
	rows, err := s.db.Query(context.Background(), `SELECT reservation_id::text FROM reservation_items
WHERE seat_id = $1 AND status IN ('HELD', 'SOLD', 'CHECKED_IN')`, seat)
	if err != nil {
		return
	}
	for rows.Next() {
		var o string
		if rows.Scan(&o) == nil {
			owners = append(owners, o)
		}
	}
	if rows.Err() != nil {
		return
	}
	ret := s.hist.now()
	owner := strings.Join(owners, ",")
	s.hist.add(len(s.buyers), []int64{seat}, seatInput{Kind: "read"}, seatOutput{Owner: owner}, call, ret)
}

// invariants is what a drill table row reports after a fault.
type invariants struct {
	doubleOwners, doubleCharges, bad, unsettled int
	linearizable                                string
	ops                                         int
	// note replaces the figures for drills that check other things.
	note string
}

func (i invariants) String() string {
	if i.note != "" {
		return i.note
	}
	return fmt.Sprintf("double owners %d, double charges %d, 500s/bad answers %d, unsettled %d, history %s (%d ops)",
		i.doubleOwners, i.doubleCharges, i.bad, i.unsettled, i.linearizable, i.ops)
}

// check reads every seat once more and evaluates the invariants.
func (s *sale) check() invariants {
	t := s.t
	ctx := context.Background()
	for _, seat := range s.seats {
		s.readOwner(seat)
	}
	var inv invariants
	require.NoError(t, s.db.QueryRow(ctx, `
SELECT count(*) FROM (SELECT seat_id FROM reservation_items WHERE status IN ('HELD','SOLD','CHECKED_IN')
GROUP BY seat_id HAVING count(*) > 1) x`).Scan(&inv.doubleOwners))
	require.NoError(t, s.db.QueryRow(ctx, `
SELECT count(*) FROM (
  SELECT i.metadata->>'reservation_id' FROM sandbox_intents i LEFT JOIN sandbox_refunds r ON r.intent_id = i.id
  WHERE i.charged_at IS NOT NULL AND r.id IS NULL GROUP BY 1 HAVING count(*) > 1) d`).Scan(&inv.doubleCharges))
	s.mu.Lock()
	inv.bad, inv.unsettled = len(s.bad), len(s.unsettle)
	s.mu.Unlock()
	var why string
	inv.linearizable, inv.ops, why = s.hist.checkLinearizable(time.Minute)
	if why != "" {
		s.t.Logf("history not linearizable: %s", why)
	}
	return inv
}

// tally returns the answers counted since the last tally, "40×201 3×409".
func (s *sale) tally() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := tallyOf(s.statuses)
	s.statuses = map[int]int{}
	if s.releasedByPayments > 0 {
		out += fmt.Sprintf(" (%d holds released by a payment start: providers_unavailable)", s.releasedByPayments)
		s.releasedByPayments = 0
	}
	return out
}

// tallyOf formats answers by status, "40×201 3×409".
func tallyOf(statuses map[int]int) string {
	codes := make([]int, 0, len(statuses))
	for c := range statuses {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	var parts []string
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%d×%d", statuses[c], c))
	}
	return strings.Join(parts, " ")
}

// errorCode is the code of an error answer ("" for none).
func errorCode(a answer) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(a.body, &e)
	return e.Error.Code
}
