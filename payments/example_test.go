package payments_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/module/moduletest"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/payments"
	"github.com/presenced/presenced/payments/ticketcode"
	"github.com/presenced/presenced/store"
)

// `presenced check` is Check on the admin part: every correctness monitor,
// each a count that must read 0 (here, on a database that sold nothing).
func ExampleModule_Check() {
	env := testenv.Example("ExampleModule_Check")
	defer env.Close()
	ctx := context.Background()
	m := newExampleModule()
	host := moduletest.New(env, nil, moduletest.Stores{Postgres: exampleDB(env)})
	if err := m.StartAdmin(ctx, host); err != nil {
		panic(err)
	}

	results, err := m.Check(ctx)
	if err != nil {
		panic(err)
	}
	for _, r := range results {
		fmt.Println(r.Name, r.Count)
	}
	// Output:
	// double_owned_seats 0
	// paid_without_tickets 0
	// initializing_stuck 0
	// refund_required_stale 0
	// money_dead_letters 0
}

// `presenced manifest export` is ExportManifest: an event's paid tickets,
// sealed for the gates with the manifest key, valid for a while.
func ExampleModule_ExportManifest() {
	env := testenv.Example("ExampleModule_ExportManifest")
	defer env.Close()
	ctx := context.Background()
	m := newExampleModule()
	host := moduletest.New(env, nil, moduletest.Stores{Postgres: exampleDB(env)})
	if err := m.StartAdmin(ctx, host); err != nil {
		panic(err)
	}

	key := make([]byte, 32) // payments.manifest_key
	_, _ = rand.Read(key)
	sealed, n, err := m.ExportManifest(ctx, "final-2027", key, 6*time.Hour)
	fmt.Println(n, "tickets", err)
	man, err := ticketcode.OpenManifest(sealed, key, time.Now())
	fmt.Println(man.Event, man.ExpiresAt.Sub(man.IssuedAt), err)
	// Output:
	// 0 tickets <nil>
	// final-2027 6h0m0s <nil>
}

// newExampleModule builds payments on the sandbox provider with a ticket
// key, the way development mode resolves them.
func newExampleModule() *payments.Module {
	cfg := config.Default().Payments
	cfg.Primary, cfg.TicketKey = "sandbox", ticketcode.NewKey("example")
	m, err := payments.New(payments.Deps{Config: cfg, Keys: store.NewKeyspace("example:"),
		Booking: soldNothing{}, Metrics: prometheus.NewRegistry(), Log: testenv.Logger()})
	if err != nil {
		panic(err)
	}
	return m
}

// exampleDB is a migrated database of the example's own: no sale of the
// package's tests shows in its monitors.
func exampleDB(env *testenv.ExampleTB) *pgxpool.Pool {
	db, err := pgxpool.New(context.Background(), testenv.OwnPostgresURL(env))
	if err != nil {
		panic(err)
	}
	env.Cleanup(db.Close)
	return db
}

// soldNothing is the booking port of a booking that sold nothing (a
// process gets the app's adapter of the booking module).
type soldNothing struct{}

func (soldNothing) LockCheckout(context.Context, pgx.Tx, string) (payments.Checkout, error) {
	return payments.Checkout{}, payments.ErrNoReservation
}
func (soldNothing) MarkPaid(context.Context, pgx.Tx, string) error { return payments.ErrNoReservation }
func (soldNothing) ReleaseCheckout(context.Context, pgx.Tx, string) (func(context.Context), error) {
	return nil, payments.ErrNoReservation
}
func (soldNothing) Lines(context.Context, pgx.Tx, string) ([]payments.Line, error) {
	return nil, payments.ErrNoReservation
}
func (soldNothing) DoubleOwnedSeats(context.Context, pgx.Tx) (int, error) { return 0, nil }
