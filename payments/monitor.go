package payments

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/config"
)

// The correctness monitors of seed 002, each a count that must be zero:
// evaluated by the workers into presenced_payments_monitor_violations and
// by `presenced check`, which exits non-zero on any.

// checkSQL are the monitors payments answers from its own tables.
var checkSQL = []struct{ name, what, sql string }{
	{"paid_without_tickets", "payments SUCCEEDED more than 5 minutes ago with no ticket",
		`SELECT count(*) FROM payments p WHERE p.status = 'SUCCEEDED' AND p.charged_at < clock_timestamp() - interval '5 minutes'
		 AND NOT EXISTS (SELECT 1 FROM tickets t WHERE t.payment_id = p.id)`},
	{"initializing_stuck", "payments INITIALIZING for more than 2 minutes",
		`SELECT count(*) FROM payments WHERE status = 'INITIALIZING' AND created_at < clock_timestamp() - interval '2 minutes'`},
	{"refund_required_stale", "payments REFUND_REQUIRED for more than 15 minutes",
		`SELECT count(*) FROM payments WHERE status = 'REFUND_REQUIRED' AND updated_at < clock_timestamp() - interval '15 minutes'`},
	{"money_dead_letters", "refunds (of payments and orphan charges) in the manual queue: automatic retries exhausted",
		`SELECT (SELECT count(*) FROM payments WHERE status = 'REFUND_REQUIRED' AND manual)
		      + (SELECT count(*) FROM payment_orphan_charges WHERE status = 'SEEN' AND manual)`},
}

// checkDoubleOwned is the monitor booking answers.
const checkDoubleOwned = "double_owned_seats"

// monitorChecks names every monitor, in the order Check reads them.
func monitorChecks() []string {
	names := []string{checkDoubleOwned}
	for _, c := range checkSQL {
		names = append(names, c.name)
	}
	return names
}

// check evaluates every monitor in one read-only transaction on db.
func check(ctx context.Context, db *pgxpool.Pool, b Booking) ([]CheckResult, error) {
	var out []CheckResult
	err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		n, err := b.DoubleOwnedSeats(ctx, tx)
		if err != nil {
			return err
		}
		out = append(out, CheckResult{Name: checkDoubleOwned, Count: int64(n), What: "seats with more than one live owner"})
		for _, c := range checkSQL {
			var n int64
			if err := tx.QueryRow(ctx, c.sql).Scan(&n); err != nil {
				return fmt.Errorf("check %s: %w", c.name, err)
			}
			out = append(out, CheckResult{Name: c.name, Count: n, What: c.what})
		}
		return nil
	})
	return out, err
}

type monitor struct {
	db      *pgxpool.Pool
	rdb     redis.UniversalClient
	booking Booking
	stream  string
	cfg     config.Payments
	m       *metrics
	log     *slog.Logger
}

func (mo *monitor) Run(ctx context.Context) error {
	return every(ctx, mo.cfg.MonitorInterval, func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		res, err := check(ctx, mo.db, mo.booking)
		if err != nil {
			if ctx.Err() == nil {
				mo.log.Warn("correctness monitors", "err", err)
			}
			return
		}
		for _, r := range res {
			mo.m.monitor.WithLabelValues(r.Name).Set(float64(r.Count))
			if r.Count > 0 {
				mo.log.Error("correctness monitor violated", "check", r.Name, "count", r.Count, "what", r.What)
			}
		}
		if p, err := mo.rdb.XPending(ctx, mo.stream, fulfillmentGroup).Result(); err == nil {
			mo.m.fulfillPending.Set(float64(p.Count))
		}
	})
}
