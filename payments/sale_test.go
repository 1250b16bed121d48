package payments_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/presenced/presenced/app/apptest"
	"github.com/presenced/presenced/booking"
	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/payments"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// sale is a running booking plane and worker over the test stores, with one
// event on sale and a receiver counting ticket notifications.
type sale struct {
	t     *testing.T
	srv   *apptest.Server
	cfg   config.Config
	db    *pgxpool.Pool
	event string
	seats []int64
	notes *notes
	mu    sync.Mutex
	next  int
}

// noteSecret signs the ticket notifications of the tests' sales.
const noteSecret = "whsec_bm90aWZpY2F0aW9uLXNlY3JldC0wMTIz"

// notes counts notification webhooks per reservation.
type notes struct {
	mu   sync.Mutex
	seen map[string]int
	srv  *httptest.Server
}

func (n *notes) count(reservation string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.seen[reservation]
}

func startSale(t *testing.T, seats int, tweak func(*config.Config)) *sale {
	t.Helper()
	n := &notes{seen: map[string]int{}}
	// The receiver verifies like a customer's would: the Standard Webhooks
	// library with the whsec_ secret.
	receiver, err := standardwebhooks.NewWebhook(noteSecret)
	require.NoError(t, err)
	n.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := receiver.Verify(body, r.Header); err != nil {
			t.Errorf("a ticket notification does not verify: %v", err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var note payments.Notification
		_ = json.Unmarshal(body, &note)
		if got, want := r.Header.Get("webhook-id"), "tickets-"+note.Reservation; got != want {
			t.Errorf("webhook-id %q, want %q", got, want)
		}
		n.mu.Lock()
		n.seen[note.Reservation]++
		n.mu.Unlock()
	}))
	t.Cleanup(n.srv.Close)
	cfg := apptest.Config(t)
	cfg.Roles = []string{"admit", "browse", "booking", "worker"}
	cfg.Waitingroom.TickInterval = 50 * time.Millisecond
	cfg.Waitingroom.TickLeaseTTL = 500 * time.Millisecond
	cfg.Booking.HoldsPerMinute = 10_000
	cfg.Outbox.PollInterval = 20 * time.Millisecond
	cfg.Payments.WorkerInterval = 100 * time.Millisecond
	cfg.Payments.ClaimIdle = 2 * time.Second
	cfg.Payments.MonitorInterval = time.Second
	cfg.Payments.RecoveryAfter = time.Second
	cfg.Payments.RefundBackoff = 100 * time.Millisecond
	cfg.Payments.Sandbox.DeliveryBackoff = 100 * time.Millisecond
	cfg.Payments.Notify = config.PaymentsNotify{Sender: "webhook", WebhookURL: n.srv.URL,
		WebhookSecret: noteSecret, Timeout: 5 * time.Second}
	if tweak != nil {
		tweak(&cfg)
	}
	s := &sale{t: t, cfg: cfg, notes: n}
	s.srv = apptest.Start(t, cfg)
	db, err := pgxpool.New(context.Background(), cfg.Postgres.URL)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	s.db = db
	s.cfg = s.srv.App.Config
	s.event = "pay-" + strings.ToLower(strings.ReplaceAll(uuid.NewString()[:13], "-", ""))
	spec := booking.EventSpec{ID: s.event, Currency: "EUR", StartsAt: time.Now().Add(30 * 24 * time.Hour),
		Sections: []booking.SectionSpec{{ID: "A", Rows: 1, SeatsPerRow: seats, BasePrice: 1500}}}
	s.admin(http.MethodPost, "/v1/admin/events", spec, http.StatusCreated)
	s.admin(http.MethodPut, "/v1/admin/waitingrooms/"+s.event,
		map[string]any{"capacity": 100_000, "batch": 10_000, "leaseSeconds": 1800, "heartbeatTimeoutSeconds": 600}, http.StatusCreated)
	var m booking.SeatMapView
	status, body := s.do(http.MethodGet, "/v1/events/"+s.event+"/seats", nil, nil)
	require.Equal(t, 200, status, body)
	require.NoError(t, json.Unmarshal([]byte(body), &m))
	for _, st := range m.Seats {
		s.seats = append(s.seats, st.ID)
	}
	return s
}

func (s *sale) do(method, path string, hdr map[string]string, in any) (int, string) {
	s.t.Helper()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		require.NoError(s.t, err)
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.srv.URL+path, body)
	require.NoError(s.t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

func (s *sale) admin(method, path string, in any, want int) {
	s.t.Helper()
	status, body := s.do(method, path, map[string]string{auth.APIKeyHeader: s.cfg.Auth.APIKey}, in)
	require.Equal(s.t, want, status, body)
}

func (s *sale) token(user string) string {
	tok, err := auth.SignDev(s.cfg.Auth.JWTSecret, user, time.Hour, nil, "", "")
	require.NoError(s.t, err)
	return tok
}

// buyer is a user admitted through the waiting room.
type buyer struct {
	user, token, pass string
}

func (s *sale) admit(user string) buyer {
	s.t.Helper()
	b := buyer{user: user, token: s.token(user)}
	testenv.Eventually(s.t, 20*time.Second, func() bool {
		status, body := s.do(http.MethodPost, "/v1/waitingroom/"+s.event+"/join", map[string]string{"Authorization": "Bearer " + b.token}, nil)
		var ans struct {
			State string `json:"state"`
			Pass  string `json:"pass"`
		}
		_ = json.Unmarshal([]byte(body), &ans)
		b.pass = ans.Pass
		return status == 200 && ans.State == "admitted"
	}, "%s admitted", user)
	return b
}

// hold admits a fresh buyer and holds n unused seats; it returns the buyer
// and the reservation id.
func (s *sale) hold(n int) (buyer, string) {
	s.t.Helper()
	s.mu.Lock()
	first := s.next
	s.next += n
	s.mu.Unlock()
	require.LessOrEqual(s.t, first+n, len(s.seats), "the test event has too few seats")
	b := s.admit(fmt.Sprintf("%s-u%d", s.event, first))
	// A 503 (the database busy on a loaded machine) is retried with the
	// same Idempotency-Key, as a client would: these tests are about what
	// follows the hold.
	var status int
	var body string
	testenv.Eventually(s.t, 30*time.Second, func() bool {
		status, body = s.do(http.MethodPost, "/v1/events/"+s.event+"/holds", map[string]string{
			"Authorization": "Bearer " + b.token, booking.HeaderAdmissionPass: b.pass, booking.HeaderIdempotencyKey: "h" + fmt.Sprint(first),
		}, map[string]any{"seats": s.seats[first : first+n]})
		if status == http.StatusServiceUnavailable {
			time.Sleep(100 * time.Millisecond)
			return false
		}
		return true
	}, "the hold kept answering 503")
	require.Equal(s.t, 201, status, body)
	var r booking.Reservation
	require.NoError(s.t, json.Unmarshal([]byte(body), &r))
	return b, r.ID
}

func (s *sale) pay(b buyer, reservation, key string) (int, payments.PaymentView, string) {
	s.t.Helper()
	hdr := map[string]string{"Authorization": "Bearer " + b.token}
	if key != "" {
		hdr[payments.HeaderIdempotencyKey] = key
	}
	status, body := s.do(http.MethodPost, "/v1/reservations/"+reservation+"/payments", hdr, nil)
	var v payments.PaymentView
	if status == 201 {
		require.NoError(s.t, json.Unmarshal([]byte(body), &v))
	}
	return status, v, body
}

func (s *sale) confirm(v payments.PaymentView, faults ...string) {
	s.t.Helper()
	status, body := s.do(http.MethodPost, v.ConfirmURL, nil, payments.SandboxConfirm{ClientSecret: v.ClientSecret, Faults: faults})
	require.Equal(s.t, 200, status, body)
}

// event builds a Stripe-shaped event about payment p.
func event(id, typ, ref, paymentID string, amount int64, currency string) []byte {
	obj := map[string]any{"id": ref, "object": "payment_intent", "amount": amount, "currency": currency, "status": "succeeded",
		"metadata": map[string]string{"payment_id": paymentID}}
	raw, _ := json.Marshal(map[string]any{"id": id, "object": "event", "api_version": stripe.APIVersion,
		"created": time.Now().Unix(), "type": typ, "data": map[string]any{"object": obj}})
	return raw
}

// webhook posts body signed at t with secrets (stripe-go's own signer).
func (s *sale) webhook(body []byte, at time.Time, secrets ...string) (int, string) {
	s.t.Helper()
	if secrets == nil {
		secrets = s.cfg.Payments.Sandbox.WebhookSecrets
	}
	var sigs []string
	var ts string
	for _, sec := range secrets {
		h := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: sec, Timestamp: at}).Header
		t, v1, _ := strings.Cut(h, ",")
		ts = t
		sigs = append(sigs, v1)
	}
	req, err := http.NewRequest(http.MethodPost, s.srv.URL+"/v1/payments/webhooks/sandbox", bytes.NewReader(body))
	require.NoError(s.t, err)
	req.Header.Set(payments.HeaderSignature, ts+","+strings.Join(sigs, ","))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

func (s *sale) scalar(sql string, args ...any) int64 {
	s.t.Helper()
	var n int64
	require.NoError(s.t, s.db.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func (s *sale) text(sql string, args ...any) string {
	s.t.Helper()
	var v string
	require.NoError(s.t, s.db.QueryRow(context.Background(), sql, args...).Scan(&v))
	return v
}

func (s *sale) paymentStatus(id string) string {
	return s.text(`SELECT status FROM payments WHERE id = $1`, id)
}

func (s *sale) reservationStatus(id string) string {
	return s.text(`SELECT status FROM reservations WHERE id = $1`, id)
}

func (s *sale) tickets(reservation string) int64 {
	return s.scalar(`SELECT count(*) FROM tickets WHERE reservation_id = $1`, reservation)
}

// charges counts what the sandbox really charged for a reservation.
func (s *sale) charges(reservation string) int64 {
	return s.scalar(`SELECT count(*) FROM sandbox_intents WHERE metadata->>'reservation_id' = $1 AND charged_at IS NOT NULL`, reservation)
}

func (s *sale) intents(reservation string) int64 {
	return s.scalar(`SELECT count(*) FROM sandbox_intents WHERE metadata->>'reservation_id' = $1`, reservation)
}

// waitFulfilled waits for a paid reservation's tickets and notification.
func (s *sale) waitFulfilled(reservation string, seats int) {
	s.t.Helper()
	testenv.Eventually(s.t, 20*time.Second, func() bool {
		return s.tickets(reservation) == int64(seats) && s.notes.count(reservation) >= 1
	}, "tickets and notification of %s", reservation)
}

// requireSeatsConsistent: no seat has two live owners, and every seat of
// the event is sold by a PAID reservation, held by a pending one, or free.
func (s *sale) requireSeatsConsistent() {
	s.t.Helper()
	require.Zero(s.t, s.scalar(`SELECT count(*) FROM (SELECT i.seat_id FROM reservation_items i JOIN seats st ON st.id = i.seat_id
		WHERE st.event_id = $1 AND i.status IN ('HELD','SOLD','CHECKED_IN') GROUP BY i.seat_id HAVING count(*) > 1) d`, s.event))
	require.Zero(s.t, s.scalar(`SELECT count(*) FROM seats st LEFT JOIN reservations r ON r.id = st.reservation_id
		WHERE st.event_id = $1 AND NOT (
		   (st.status = 'SOLD' AND r.status = 'PAID') OR (st.status = 'HELD' AND r.status = 'PENDING_PAYMENT')
		   OR (st.status = 'AVAILABLE' AND st.reservation_id IS NULL))`, s.event), "a seat sold that was also released")
}
