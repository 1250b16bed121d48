package cli

import (
	"github.com/spf13/cobra"

	"github.com/presenced/presenced/app"
	"github.com/presenced/presenced/booking"
	"github.com/presenced/presenced/payments"
)

// A one-shot command builds the modules it calls through the app, as
// serve does, with only the command parts it needs (app.OpenCommand), and
// calls their in-process API: never a store directly.

// withBooking runs f on the booking module of a process started with
// booking's admin part.
func withBooking(cmd *cobra.Command, flags *commonFlags, f func(b *booking.Module) error) error {
	return withCommand(cmd, flags, []string{app.BookingAdmin}, func(a *app.App) error {
		b, err := a.Booking()
		if err != nil {
			return err
		}
		return f(b)
	})
}

// withPayments runs f on the payments module of a process started with
// payments' admin part.
func withPayments(cmd *cobra.Command, flags *commonFlags, f func(a *app.App, m *payments.Module) error) error {
	return withCommand(cmd, flags, []string{app.PaymentsAdmin}, func(a *app.App) error {
		m, err := a.Payments()
		if err != nil {
			return err
		}
		return f(a, m)
	})
}

// withCommand runs f on a process of the command parts, on the configured
// stores (or the development ones), migrated, and shuts it down afterwards.
func withCommand(cmd *cobra.Command, flags *commonFlags, parts []string, f func(a *app.App) error) error {
	cfg, err := flags.load(cmd)
	if err != nil {
		return err
	}
	cfg.Postgres.MigrateOnStart = true
	a, err := app.OpenCommand(cmd.Context(), cfg, processLogger(cfg.Log), parts...)
	if err != nil {
		return err
	}
	defer func() { _ = a.Shutdown() }()
	return f(a)
}
