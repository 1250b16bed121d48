package payments

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

// mailbox is an in-process SMTP server (emersion/go-smtp) keeping what it
// is sent.
type mailbox struct {
	mu   sync.Mutex
	msgs []mail
}

type mail struct {
	from string
	to   []string
	data string
}

type mailSession struct {
	box *mailbox
	cur mail
}

func (s *mailSession) Reset()        { s.cur = mail{} }
func (s *mailSession) Logout() error { return nil }
func (s *mailSession) Mail(from string, _ *smtp.MailOptions) error {
	s.cur.from = from
	return nil
}
func (s *mailSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.cur.to = append(s.cur.to, to)
	return nil
}
func (s *mailSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.cur.data = string(b)
	s.box.mu.Lock()
	s.box.msgs = append(s.box.msgs, s.cur)
	s.box.mu.Unlock()
	return nil
}

func startMailbox(t *testing.T) (*mailbox, string) {
	t.Helper()
	box := &mailbox{}
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &mailSession{box: box}, nil }))
	srv.Domain = "localhost"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return box, ln.Addr().String()
}

func TestSMTPSender(t *testing.T) {
	t.Parallel()
	box, addr := startMailbox(t)
	s, err := newSender(config.PaymentsNotify{Sender: "smtp", SMTPAddr: addr, SMTPFrom: "tickets@presenced.test",
		SMTPDomain: "fans.test", Timeout: 5 * time.Second}, nil)
	require.NoError(t, err)
	n := Notification{User: "asha", Event: "arena", Reservation: "r-1",
		Tickets: []TicketView{{ID: "t-1", Label: "Section A, row 14, seat 6"}, {ID: "t-2", Label: "Section A, row 14, seat 7"}}}
	require.NoError(t, s.Send(context.Background(), n))
	box.mu.Lock()
	defer box.mu.Unlock()
	require.Len(t, box.msgs, 1)
	m := box.msgs[0]
	require.Equal(t, "tickets@presenced.test", m.from)
	require.Equal(t, []string{"asha@fans.test"}, m.to)
	require.Contains(t, m.data, "Subject: Your tickets for arena")
	require.Contains(t, m.data, "Section A, row 14, seat 7")
	require.Error(t, s.Send(context.Background(), Notification{User: "evil\r\nRCPT TO:<x@y>"}), "no header injection")

	// A relay that is down is an error (retried by the notifier), not a hang.
	down, err := newSender(config.PaymentsNotify{Sender: "smtp", SMTPAddr: "127.0.0.1:1", SMTPFrom: "a@b", SMTPDomain: "c", Timeout: time.Second}, nil)
	require.NoError(t, err)
	require.Error(t, down.Send(context.Background(), n))
}

type flakySender struct {
	mu    sync.Mutex
	calls int
	fail  bool
}

func (f *flakySender) Send(context.Context, Notification) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.fail {
		return errors.New("relay down")
	}
	return nil
}

// A notification that cannot be sent is retried at growing delays, then
// parked in the dead-letter stream; tickets are untouched by it.
func TestNotificationRetriesThenDeadLetter(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.Postgres(t), testenv.Redis(t)
	ctx := context.Background()
	event, res := "notify-"+uuid.NewString()[:8], uuid.NewString()
	_, err := db.Exec(ctx, `INSERT INTO events (id, name, currency, starts_at, sale_opens_at) VALUES ($1, $1, 'EUR', now(), now())`, event)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `INSERT INTO reservations (id, event_id, user_id, status, expires_at, total, currency)
		VALUES ($1, $2, 'u', 'PAID', now(), 0, 'EUR')`, res, event)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `INSERT INTO payment_notifications (reservation_id, user_id, event_id, tickets) VALUES ($1, 'u', $2, 0)`, res, event)
	require.NoError(t, err)
	m, err := newMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	cfg := config.Default().Payments
	sender := &flakySender{fail: true}
	dead := store.NewKeyspace(testenv.Prefix(t)).Global("payments").Key("notify", "dead")
	n := &notifier{db: db, rdb: rdb, sender: sender, deadStream: dead, cfg: cfg, m: m, log: testenv.Logger(),
		retries: []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond, 8 * time.Millisecond}}
	status := func() (string, int) {
		var st string
		var attempts int
		require.NoError(t, db.QueryRow(ctx, `SELECT status, attempts FROM payment_notifications WHERE reservation_id = $1`, res).Scan(&st, &attempts))
		return st, attempts
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		_, err := n.SendOnce(ctx)
		require.NoError(t, err)
		st, _ := status()
		return st == "DEAD"
	}, "dead-lettered")
	_, attempts := status()
	require.Equal(t, 5, attempts, "the first try and four retries")
	require.Equal(t, 5, sender.calls)
	entries, err := rdb.XRange(ctx, dead, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Equal(t, res, entries[0].Values["reservation"])
}
