// Package cli holds the subcommands of the presenced binary.
package cli

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/store"
)

// commonFlags are the configuration flags of one command. Every command
// that reads the configuration takes --config and --data-dir; the store and
// serving flags only where they mean something (serve takes them all).
type commonFlags struct {
	file     string
	listen   string
	roles    string
	redis    string
	postgres string
	dataDir  string
	// optional are the optional flags registered here; a command's own flag
	// of the same name (the gate's --listen) is not a configuration key.
	optional map[string]bool
}

// Optional configuration flags, by name.
const (
	flagListen   = "listen"
	flagRoles    = "roles"
	flagRedis    = "redis-url"
	flagPostgres = "postgres-url"
)

// configFlags registers --config, --data-dir and the named optional flags
// on cmd's own flag set.
func configFlags(cmd *cobra.Command, optional ...string) *commonFlags {
	f := &commonFlags{optional: map[string]bool{}}
	fs := cmd.Flags()
	fs.StringVar(&f.file, "config", "", "YAML configuration file (default: none, or $PRESENCED_CONFIG)")
	fs.StringVar(&f.dataDir, "data-dir", "", "development state folder: private PostgreSQL, development secrets and keys (data_dir, default ./var)")
	for _, name := range optional {
		f.optional[name] = true
		switch name {
		case flagListen:
			fs.StringVar(&f.listen, flagListen, "", "HTTP listen address (listen, default 127.0.0.1:8080)")
		case flagRoles:
			fs.StringVar(&f.roles, flagRoles, "", "comma separated roles to run (roles): "+strings.Join(roleNames(), ", "))
		case flagRedis:
			fs.StringVar(&f.redis, flagRedis, "", "Redis URL (redis.url); empty starts a development Redis")
		case flagPostgres:
			fs.StringVar(&f.postgres, flagPostgres, "", "PostgreSQL DSN (postgres.url); empty starts a private PostgreSQL")
		}
	}
	return f
}

// load builds the configuration from defaults, file, environment and flags.
func (f *commonFlags) load(cmd *cobra.Command) (config.Config, error) {
	return config.Load(f.source(cmd))
}

// source gathers the layers above the defaults: file, environment, flags.
func (f *commonFlags) source(cmd *cobra.Command) config.Source {
	file := f.file
	if file == "" {
		file = os.Getenv("PRESENCED_CONFIG")
	}
	flags := map[string]string{}
	set := func(name, key, val string) {
		if (name == "data-dir" || f.optional[name]) && cmd.Flags().Changed(name) {
			flags[key] = val
		}
	}
	set(flagListen, "listen", f.listen)
	set(flagRoles, "roles", f.roles)
	set(flagRedis, "redis.url", f.redis)
	set(flagPostgres, "postgres.url", f.postgres)
	set("data-dir", "data_dir", f.dataDir)
	return config.Source{File: file, Environ: os.Environ(), Flags: flags}
}

// processLogger builds the process logger from the log settings and routes
// go-redis's own log lines (one logger per process) into it.
func processLogger(cfg config.Log) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Level))
	opts := &slog.HandlerOptions{Level: level}
	log := slog.New(slog.NewTextHandler(os.Stderr, opts))
	if cfg.Format == "json" {
		log = slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	store.RouteRedisLog(log)
	return log
}

func warnUnknownEnv(log *slog.Logger) {
	for _, name := range config.UnknownEnv(os.Environ(), "PRESENCED_TEST_", "PRESENCED_CONFIG") {
		log.Warn("environment variable sets no configuration key", "name", name)
	}
}

func printf(cmd *cobra.Command, format string, args ...any) {
	fmt.Fprintf(cmd.OutOrStdout(), format, args...)
}
