package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/presenced/presenced/app"
)

// Serve is `presenced serve`: run the roles until SIGINT or SIGTERM.
func Serve() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the server with the configured roles (default: all)",
		Long: `Run the server. With no configuration it is a single-node development
server: an embedded Redis, a private PostgreSQL under ./var, development
secrets, all roles in one process, on 127.0.0.1:8080.`,
		Example: `  # development: everything in one process, stores started for you
  presenced serve

  # one plane of a production split, against real stores
  presenced serve --roles ingest,count --listen 0.0.0.0:8080 \
    --redis-url redis://redis:6379/0 --postgres-url postgres://presenced@db/presenced

  # settings from a file, overridden by PRESENCED_* variables and flags
  presenced serve --config /etc/presenced/config.yaml`,
		Args: cobra.NoArgs,
	}
	flags := configFlags(cmd, flagListen, flagRoles, flagRedis, flagPostgres)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		// First, before anything slow: a preStop hook may send the drain
		// while the process is still connecting to its stores, and Go
		// discards a SIGUSR1 nobody asked for, so the drain would be lost
		// and the pod would take sockets until SIGTERM cut them without the
		// reconnect hint. Caught now, it is honoured once serving.
		drains := make(chan os.Signal, 1)
		signal.Notify(drains, drainSignal)
		defer signal.Stop(drains)
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
		// No TCP keep-alive probes: every long-lived connection has its own
		// liveness check (WebSocket pings, stream write deadlines, the HTTP
		// idle timeout), and the probes' four socket options cost each
		// accept as many system calls, a burst of reconnects included.
		lc := net.ListenConfig{KeepAlive: -1}
		ln, err := lc.Listen(cmd.Context(), "tcp", cfg.Listen)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
		}
		if err := a.Start(ctx); err != nil {
			ln.Close()
			_ = a.Shutdown()
			return err
		}
		drainOnSignal(ctx, a, drains)
		return a.Run(ctx, ln)
	}
	return cmd
}

// drainSignal starts a drain (see `presenced drain`): only a process of the
// same user on the same machine or container can send it, so the drain
// needs no endpoint a client could reach.
const drainSignal = syscall.SIGUSR1

// drainOnSignal drains the server's sockets when drainSignal arrives on
// sig (or arrived before: the channel keeps one), within
// http.shutdown_timeout; SIGTERM still stops the process as before.
func drainOnSignal(ctx context.Context, a *app.App, sig <-chan os.Signal) {
	go func() {
		select {
		case <-ctx.Done():
			return
		case <-sig:
		}
		a.Log.Info("draining: sockets told to reconnect elsewhere (1012), /readyz answers draining")
		dctx, cancel := context.WithTimeout(ctx, a.Config.HTTP.ShutdownTimeout)
		defer cancel()
		if err := a.Server.Drain(dctx); err != nil {
			a.Log.Warn("drain", "err", err)
		}
	}()
}
