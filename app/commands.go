package app

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/presenced/presenced/booking"
	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/payments"
)

// Command parts are the module parts one-shot commands of the CLI start
// (event and hotel creation, the correctness check, manifest export). No
// role starts them: a command builds only the modules it calls, and
// connects only to the stores its parts declare, as a served part does.
const (
	// BookingAdmin is booking's administration: CreateEvent,
	// CreatePromotion, CreateHotel.
	BookingAdmin = "booking.admin"
	// PaymentsAdmin is payments' Check and ExportManifest.
	PaymentsAdmin = "payments.admin"
)

var commandParts = map[string]part{
	BookingAdmin:  {needs: deps(needPostgres), start: bookingPart((*booking.Module).StartAdmin)},
	PaymentsAdmin: {needs: deps(needPostgres), secrets: names(secretPayments), start: paymentsPart((*payments.Module).StartAdmin)},
}

// OpenCommand prepares and starts a process for a one-shot command: only
// the named command parts start, against the configured (or development)
// stores. Nothing listens and no loop runs; the caller calls the modules'
// in-process API (Booking, Payments) and then Shutdown.
func OpenCommand(ctx context.Context, cfg config.Config, log *slog.Logger, partNames ...string) (*App, error) {
	for _, p := range partNames {
		if _, ok := commandParts[p]; !ok {
			return nil, fmt.Errorf("no command part %q", p)
		}
	}
	a, err := newApp(cfg, log, nil, partNames, commandParts)
	if err != nil {
		return nil, err
	}
	if err := a.startParts(ctx); err != nil {
		return nil, joinShutdown(a, err)
	}
	return a, nil
}

// joinShutdown shuts a down after a failed start, keeping both errors.
func joinShutdown(a *App, err error) error {
	if serr := a.Shutdown(); serr != nil {
		return fmt.Errorf("%w (and at shutdown: %v)", err, serr)
	}
	return err
}
