// Package cli holds the subcommands of the presenced binary.
package cli

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/store"
)

// commonFlags are the flags every command that reads the configuration has.
type commonFlags struct {
	file     string
	listen   string
	roles    string
	redis    string
	postgres string
	dataDir  string
}

// AddConfigFlags registers the configuration flags on the root command.
func AddConfigFlags(fs *pflag.FlagSet) *commonFlags {
	f := &commonFlags{}
	fs.StringVar(&f.file, "config", "", "YAML configuration file (default: none, or $PRESENCED_CONFIG)")
	fs.StringVar(&f.listen, "listen", "", "HTTP listen address (listen)")
	fs.StringVar(&f.roles, "roles", "", "comma separated roles to run (roles): "+strings.Join(roleNames(), ", "))
	fs.StringVar(&f.redis, "redis-url", "", "Redis URL (redis.url); empty starts a development Redis")
	fs.StringVar(&f.postgres, "postgres-url", "", "PostgreSQL DSN (postgres.url); empty starts a private PostgreSQL")
	fs.StringVar(&f.dataDir, "data-dir", "", "development state folder (data_dir)")
	return f
}

// load builds the configuration from defaults, file, environment and flags.
func (f *commonFlags) load(cmd *cobra.Command) (config.Config, error) {
	file := f.file
	if file == "" {
		file = os.Getenv("PRESENCED_CONFIG")
	}
	flags := map[string]string{}
	set := func(name, key, val string) {
		if cmd.Flags().Changed(name) {
			flags[key] = val
		}
	}
	set("listen", "listen", f.listen)
	set("roles", "roles", f.roles)
	set("redis-url", "redis.url", f.redis)
	set("postgres-url", "postgres.url", f.postgres)
	set("data-dir", "data_dir", f.dataDir)
	return config.Load(config.Source{File: file, Environ: os.Environ(), Flags: flags})
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
