package cli

import (
	"fmt"
	"net"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/presenced/presenced/app"
)

// Serve is `presenced serve`: run the roles until SIGINT or SIGTERM.
func Serve(flags *commonFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "Run the server with the configured roles (default: all)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := flags.load(cmd)
			if err != nil {
				return err
			}
			log := processLogger(cfg.Log)
			warnUnknownEnv(log)
			a, err := app.New(cfg, log)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			ln, err := net.Listen("tcp", cfg.Listen)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
			}
			if err := a.Start(ctx); err != nil {
				ln.Close()
				_ = a.Shutdown()
				return err
			}
			return a.Run(ctx, ln)
		},
	}
}
