package payments

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/stdwebhook"
)

func newSender(c config.PaymentsNotify, log *slog.Logger) (Sender, error) {
	switch c.Sender {
	case "log":
		return logSender{log: log}, nil
	case "webhook":
		signer, err := stdwebhook.NewSigner(c.WebhookSecret)
		if err != nil {
			return nil, fmt.Errorf("payments.notify.webhook_secret: %w", err)
		}
		return &webhookSender{url: c.WebhookURL, signer: signer, client: &http.Client{Timeout: c.Timeout}}, nil
	case "smtp":
		return &smtpSender{cfg: c}, nil
	}
	return nil, fmt.Errorf("payments: unknown notification sender %q", c.Sender)
}

type logSender struct{ log *slog.Logger }

func (s logSender) Send(_ context.Context, n Notification) error {
	s.log.Info("tickets ready", "user", n.User, "event", n.Event, "reservation", n.Reservation, "tickets", len(n.Tickets))
	return nil
}

// webhookSender POSTs the notification as JSON signed like presence's
// webhooks, with the Standard Webhooks scheme. The message id is the
// reservation's: every retry of one notification carries the same id, so
// a receiver dedupes by it.
type webhookSender struct {
	url    string
	signer *stdwebhook.Signer
	client *http.Client
}

func (s *webhookSender) Send(ctx context.Context, n Notification) error {
	body, err := json.Marshal(n)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if err := s.signer.Sign(req, "tickets-"+n.Reservation, body, time.Now()); err != nil {
		return err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("notification webhook: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("notification webhook answered %d", resp.StatusCode)
	}
	return nil
}

// smtpSender mails the buyer through a relay.
type smtpSender struct{ cfg config.PaymentsNotify }

func (s *smtpSender) Send(ctx context.Context, n Notification) error {
	to := n.User
	if !strings.Contains(to, "@") {
		to = n.User + "@" + s.cfg.SMTPDomain
	}
	if strings.ContainsAny(to, "\r\n<>") {
		return fmt.Errorf("smtp: user %q makes no address", n.User)
	}
	deadline := time.Now().Add(s.cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	conn, err := (&net.Dialer{Deadline: deadline}).DialContext(ctx, "tcp", s.cfg.SMTPAddr)
	if err != nil {
		return fmt.Errorf("smtp: %w", err)
	}
	_ = conn.SetDeadline(deadline)
	c := smtp.NewClient(conn)
	defer c.Close()
	if err := c.Hello("presenced"); err != nil {
		return fmt.Errorf("smtp hello: %w", err)
	}
	if s.cfg.SMTPUser != "" {
		if err := c.Auth(sasl.NewPlainClient("", s.cfg.SMTPUser, s.cfg.SMTPPassword)); err != nil {
			return fmt.Errorf("smtp auth: %w", err)
		}
	}
	if err := c.Mail(s.cfg.SMTPFrom, nil); err != nil {
		return fmt.Errorf("smtp mail: %w", err)
	}
	if err := c.Rcpt(to, nil); err != nil {
		return fmt.Errorf("smtp rcpt: %w", err)
	}
	w, err := c.Data()
	if err != nil {
		return fmt.Errorf("smtp data: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "From: %s\r\nTo: %s\r\nSubject: Your tickets for %s\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n",
		s.cfg.SMTPFrom, to, n.Event)
	fmt.Fprintf(&b, "Your order %s is paid. Your tickets:\r\n", n.Reservation)
	for _, t := range n.Tickets {
		fmt.Fprintf(&b, "  %s  (%s)\r\n", t.Label, t.ID)
	}
	b.WriteString("Open the app to show the rotating QR code at the gate.\r\n")
	if _, err := w.Write([]byte(b.String())); err != nil {
		return fmt.Errorf("smtp write: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("smtp data: %w", err)
	}
	return c.Quit()
}

// notifyRetries are the waits after each failed send (seed 002: 5, 10, 20
// and 40 seconds); after the last the notification is dead-lettered.
var notifyRetries = []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second}

// notifier sends due notifications. Several workers may run: each claims
// rows with SKIP LOCKED and pushes their next attempt out while sending.
type notifier struct {
	db         *pgxpool.Pool
	rdb        redis.UniversalClient
	sender     Sender
	deadStream string
	retries    []time.Duration
	cfg        config.Payments
	m          *metrics
	log        *slog.Logger
}

func (n *notifier) Run(ctx context.Context) error {
	return every(ctx, n.cfg.WorkerInterval, func(ctx context.Context) {
		if _, err := n.SendOnce(ctx); err != nil && ctx.Err() == nil {
			n.log.Warn("notifications", "err", err)
		}
	})
}

// SendOnce sends one batch of due notifications.
func (n *notifier) SendOnce(ctx context.Context) (int, error) {
	retries := n.retries
	if retries == nil {
		retries = notifyRetries
	}
	rows, err := n.db.Query(ctx, `
UPDATE payment_notifications SET next_attempt_at = clock_timestamp() + make_interval(secs => $2), attempts = attempts + 1
WHERE reservation_id IN (SELECT reservation_id FROM payment_notifications
                         WHERE status = 'PENDING' AND next_attempt_at <= clock_timestamp()
                         ORDER BY next_attempt_at LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING reservation_id::text, user_id, event_id, attempts`, n.cfg.WorkerBatch, (2 * n.cfg.Notify.Timeout).Seconds())
	if err != nil {
		return 0, fmt.Errorf("claim notifications: %w", err)
	}
	type job struct {
		n        Notification
		attempts int
	}
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (job, error) {
		var j job
		return j, r.Scan(&j.n.Reservation, &j.n.User, &j.n.Event, &j.attempts)
	})
	if err != nil {
		return 0, fmt.Errorf("claim notifications: %w", err)
	}
	sent := 0
	for _, j := range jobs {
		j.n.Tickets, err = reservationTickets(ctx, n.db, j.n.Reservation)
		if err == nil {
			sctx, cancel := context.WithTimeout(ctx, n.cfg.Notify.Timeout)
			err = n.sender.Send(sctx, j.n)
			cancel()
		}
		if err == nil {
			if _, err := n.db.Exec(ctx, `UPDATE payment_notifications SET status = 'SENT', sent_at = clock_timestamp() WHERE reservation_id = $1`,
				j.n.Reservation); err != nil {
				return sent, err
			}
			n.m.notifications.WithLabelValues("sent").Inc()
			sent++
			continue
		}
		if j.attempts > len(retries) {
			n.deadLetter(ctx, j.n, j.attempts, err)
			continue
		}
		n.m.notifications.WithLabelValues("retry").Inc()
		if _, xerr := n.db.Exec(ctx, `UPDATE payment_notifications SET last_error = $2, next_attempt_at = clock_timestamp() + make_interval(secs => $3)
			WHERE reservation_id = $1`, j.n.Reservation, err.Error(), retries[j.attempts-1].Seconds()); xerr != nil {
			return sent, xerr
		}
	}
	return sent, nil
}

// deadLetter parks a notification that ran out of retries in the
// dead-letter stream, for a person or a replay tool. A lost email is not a
// lost payment: the tickets exist whatever happens here.
func (n *notifier) deadLetter(ctx context.Context, no Notification, attempts int, cause error) {
	body, _ := json.Marshal(no)
	if err := n.rdb.XAdd(ctx, &redis.XAddArgs{Stream: n.deadStream, MaxLen: 100_000, Approx: true, Values: map[string]any{
		"reservation": no.Reservation, "notification": string(body), "attempts": attempts, "error": cause.Error(),
	}}).Err(); err != nil {
		n.log.Warn("notification dead letter: retried later", "err", err)
		return // stays PENDING and is tried again; better twice than never
	}
	if _, err := n.db.Exec(ctx, `UPDATE payment_notifications SET status = 'DEAD', last_error = $2 WHERE reservation_id = $1`,
		no.Reservation, cause.Error()); err != nil {
		n.log.Warn("mark notification dead", "err", err)
	}
	n.m.notifications.WithLabelValues("dead").Inc()
	n.log.Error("notification dead-lettered", "attempts", attempts, "err", cause)
}

func reservationTickets(ctx context.Context, db *pgxpool.Pool, reservation string) ([]TicketView, error) {
	rows, err := db.Query(ctx, `SELECT id::text, event_id, reservation_id::text, label, created_at FROM tickets
		WHERE reservation_id = $1 ORDER BY line_id`, reservation)
	if err != nil {
		return nil, fmt.Errorf("read tickets: %w", err)
	}
	return pgx.CollectRows(rows, scanTicket)
}

func scanTicket(r pgx.CollectableRow) (TicketView, error) {
	var t TicketView
	return t, r.Scan(&t.ID, &t.Event, &t.Reservation, &t.Label, &t.CreatedAt)
}
