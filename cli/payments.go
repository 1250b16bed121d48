package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/spf13/cobra"

	"github.com/presenced/presenced/app"
	"github.com/presenced/presenced/payments"
	"github.com/presenced/presenced/payments/gate"
	"github.com/presenced/presenced/payments/ticketcode"
	"github.com/presenced/presenced/web/wire"
)

// CheckCmd is `presenced check`: the correctness monitors, with a non-zero
// exit status when any of them reads more than zero.
func CheckCmd() *cobra.Command {
	var flags *commonFlags
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Run the correctness monitors (double sales, paid without tickets, stuck payments, money dead letters)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withPayments(cmd, flags, func(_ *app.App, m *payments.Module) error {
				res, err := m.Check(cmd.Context())
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
				bad := 0
				for _, r := range res {
					verdict := "ok"
					if r.Count > 0 {
						verdict, bad = "VIOLATED", bad+1
					}
					fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", r.Name, r.Count, verdict, r.What)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				if bad > 0 {
					return fmt.Errorf("%d correctness monitor(s) violated", bad)
				}
				return nil
			})
		},
	}
	flags = configFlags(cmd, flagPostgres)
	return cmd
}

// ManifestCmd is `presenced manifest export`.
func ManifestCmd() *cobra.Command {
	var flags *commonFlags
	cmd := &cobra.Command{Use: "manifest", Short: "Gate manifests of paid tickets"}
	var event, out string
	var ttl time.Duration
	export := &cobra.Command{
		Use:   "export --event E --out m.bin",
		Short: "Write the encrypted, expiring manifest of an event's paid tickets for `presenced gate`",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if event == "" || out == "" {
				return errors.New("--event and --out are required")
			}
			return withPayments(cmd, flags, func(a *app.App, m *payments.Module) error {
				key, err := a.ManifestKey()
				if err != nil {
					return err
				}
				if ttl == 0 {
					ttl = a.Config.Payments.ManifestTTL
				}
				data, n, err := m.ExportManifest(cmd.Context(), event, key, ttl)
				if err != nil {
					return err
				}
				if err := os.WriteFile(out, data, 0o600); err != nil {
					return fmt.Errorf("write manifest: %w", err)
				}
				printf(cmd, "manifest of %s: %d tickets, valid %s, written to %s\n", event, n, ttl, out)
				return nil
			})
		},
	}
	flags = configFlags(export, flagPostgres)
	export.Flags().StringVar(&event, "event", "", "event id")
	export.Flags().StringVar(&out, "out", "", "file to write")
	export.Flags().DurationVar(&ttl, "ttl", 0, "how long gates accept it (default payments.manifest_ttl)")
	cmd.AddCommand(export)
	return cmd
}

// GateCmd is `presenced gate`: the venue entry service.
func GateCmd() *cobra.Command {
	var flags *commonFlags
	var manifest, db, listen, name string
	var busy time.Duration
	cmd := &cobra.Command{
		Use:   "gate --manifest m.bin --db gate.sqlite",
		Short: "Run a venue gate: POST /v1/gate/scan over a SQLite ledger (several gates may share one ledger)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if manifest == "" || db == "" {
				return errors.New("--manifest and --db are required")
			}
			cfg, err := flags.load(cmd)
			if err != nil {
				return err
			}
			if _, err := app.ResolvePayments(&cfg); err != nil {
				return err
			}
			a := &app.App{Config: cfg}
			key, err := a.ManifestKey()
			if err != nil {
				return err
			}
			raw, err := os.ReadFile(manifest)
			if err != nil {
				return fmt.Errorf("read manifest: %w", err)
			}
			m, err := ticketcode.OpenManifest(raw, key, time.Now())
			if err != nil {
				return fmt.Errorf("manifest %s: %w", manifest, err)
			}
			log := processLogger(cfg.Log)
			g, err := gate.Open(db, name, busy, log)
			if err != nil {
				return err
			}
			defer g.Close()
			n, err := g.Load(cmd.Context(), m)
			if err != nil {
				return err
			}
			e := echo.New()
			e.HideBanner, e.HidePort = true, true
			e.HTTPErrorHandler = wire.ErrorHandler(log)
			g.Routes(e)
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", listen, err)
			}
			log.Info("gate open", "gate", name, "event", m.Event, "tickets", n, "manifest_expires", m.ExpiresAt, "addr", ln.Addr().String())
			srv := &http.Server{Handler: e, ReadHeaderTimeout: 5 * time.Second}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			go func() {
				<-ctx.Done()
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(sctx)
			}()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	flags = configFlags(cmd)
	f := cmd.Flags()
	f.StringVar(&manifest, "manifest", "", "manifest `FILE` written by presenced manifest export")
	f.StringVar(&db, "db", "", "SQLite ledger (WAL), shared by every gate of the venue")
	f.StringVar(&listen, "listen", "127.0.0.1:8090", "address the gate serves on")
	f.StringVar(&name, "name", "gate-1", "this gate's name in the ledger")
	f.DurationVar(&busy, "busy-timeout", 2*time.Second, "how long a scan waits for another gate's write before failing closed")
	return cmd
}
