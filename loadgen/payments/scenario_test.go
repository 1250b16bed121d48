package payments

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/app"
	"github.com/presenced/presenced/app/apptest"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/loadgen"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The sale runs end to end against real processes: every fan either gets
// tickets, finds the seats taken, or (wrong-amount fault) is refunded; the
// SQL checks and the monitors pass.
func TestSaleScenario(t *testing.T) {
	t.Parallel()
	cfg := apptest.Config(t)
	cfg.Roles = []string{"admit", "browse", "booking", "worker"}
	cfg.Waitingroom.TickInterval = 50 * time.Millisecond
	cfg.Waitingroom.TickLeaseTTL = 500 * time.Millisecond
	cfg.Booking.HoldsPerMinute = 10_000
	cfg.Outbox.PollInterval = 20 * time.Millisecond
	cfg.Payments.WorkerInterval = 100 * time.Millisecond
	cfg.Payments.Sandbox.DeliveryBackoff = 100 * time.Millisecond
	srv := apptest.Start(t, cfg)
	sc := New()
	sc.fans, sc.seats, sc.cart, sc.faultRate = 40, 30, 1, 0.5
	sc.faults = "webhook_twice,webhook_x100,webhook_out_of_order,webhook_wrong_amount"
	sc.postgresURL = cfg.Postgres.URL
	sc.secrets.APIKey, sc.secrets.JWTSecret = srv.App.Config.Auth.APIKey, srv.App.Config.Auth.JWTSecret
	sc.Check = func(ctx context.Context) error {
		// As `presenced check` does: a process of payments' admin part.
		a, err := app.OpenCommand(ctx, srv.App.Config, testenv.Logger(), app.PaymentsAdmin)
		if err != nil {
			return err
		}
		defer func() { _ = a.Shutdown() }()
		m, err := a.Payments()
		if err != nil {
			return err
		}
		res, err := m.Check(ctx)
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Count > 0 {
				return fmt.Errorf("%s: %d", r.Name, r.Count)
			}
		}
		return nil
	}
	sum, err := loadgen.Execute(context.Background(), sc, loadgen.Options{
		Target: srv.URL, Concurrency: 8, Duration: 60 * time.Second, Timeout: 30 * time.Second,
	}, io.Discard)
	require.NoError(t, err)
	require.EqualValues(t, 40, sum.Ops)
	require.Zero(t, sum.Errors, "%v", sum.ErrorKinds)
	figures := map[string]string{}
	for _, f := range sum.Figures {
		figures[f.Name] = f.Value
	}
	t.Log(figures)
	require.Contains(t, figures["charges"], " 0 double charges, 0 charged and neither sold nor refunded")
	require.True(t, strings.HasPrefix(figures["sales"], "0 seats sold twice, 0 paid orders without tickets"), figures["sales"])
	require.Equal(t, "every monitor reads 0", figures["presenced check"])
	require.Contains(t, figures, "relay lag")
	require.Contains(t, figures, "webhooks/s")
}
