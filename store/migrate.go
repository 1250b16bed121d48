package store

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migrations is the schema of presenced, embedded in the binary.
func Migrations() fs.FS {
	sub, err := fs.Sub(migrationFS, "migrations")
	if err != nil {
		panic(err) // the embed directive guarantees the folder
	}
	return sub
}

// The runner below stays hand-written: pressly/goose (v3) and jackc/tern
// (v2) both run embedded, numbered migrations under an advisory lock, but
// either would bring its own version table (and goose an annotation in
// every file) plus a one-time bridge for every existing database, for no
// behaviour gained.

// Migration is one numbered SQL file: NNNN_name.sql.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// migrationLockID is the advisory lock held while migrating, so processes
// starting together apply each migration exactly once.
const migrationLockID = 0x70726573656e6364 // "presencd"

// ReadMigrations parses and orders the migrations in fsys.
func ReadMigrations(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var out []Migration
	seen := map[int]string{}
	for _, e := range entries {
		if e.IsDir() || path.Ext(e.Name()) != ".sql" {
			continue
		}
		num, name, ok := strings.Cut(strings.TrimSuffix(e.Name(), ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must be NNNN_name.sql", e.Name())
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations %s and %s share version %d", prev, e.Name(), v)
		}
		seen[v] = e.Name()
		body, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

const createMigrationsTable = `
CREATE TABLE IF NOT EXISTS presenced_schema_migrations (
	version    integer PRIMARY KEY,
	name       text NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now()
)`

// Migrate applies the pending migrations of fsys, each in its own
// transaction, under an advisory lock. It returns the versions it applied.
func Migrate(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS, log *slog.Logger) ([]int, error) {
	all, err := ReadMigrations(fsys)
	if err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: acquire connection: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(migrationLockID)); err != nil {
		return nil, fmt.Errorf("migrate: take lock: %w", err)
	}
	defer func() {
		// A fresh context: the unlock must happen even when ctx is done,
		// or the pooled session would keep the lock.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(migrationLockID))
	}()
	if _, err := conn.Exec(ctx, createMigrationsTable); err != nil {
		return nil, fmt.Errorf("migrate: create bookkeeping table: %w", err)
	}
	done, err := appliedVersions(ctx, pool)
	if err != nil {
		return nil, err
	}
	var applied []int
	for _, m := range all {
		if done[m.Version] {
			continue
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			return applied, fmt.Errorf("migrate %04d_%s: begin: %w", m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			_ = tx.Rollback(ctx)
			return applied, fmt.Errorf("migrate %04d_%s: %w", m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO presenced_schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
			_ = tx.Rollback(ctx)
			return applied, fmt.Errorf("migrate %04d_%s: record: %w", m.Version, m.Name, err)
		}
		if err := tx.Commit(ctx); err != nil {
			return applied, fmt.Errorf("migrate %04d_%s: commit: %w", m.Version, m.Name, err)
		}
		log.Info("migration applied", "version", m.Version, "name", m.Name)
		applied = append(applied, m.Version)
	}
	return applied, nil
}

// PendingMigrations lists migrations of fsys not yet applied, so a process
// can refuse to run against an out-of-date schema.
func PendingMigrations(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS) ([]Migration, error) {
	all, err := ReadMigrations(fsys)
	if err != nil {
		return nil, err
	}
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass('presenced_schema_migrations') IS NOT NULL").Scan(&exists); err != nil {
		return nil, fmt.Errorf("check schema: %w", err)
	}
	if !exists {
		return all, nil
	}
	done, err := appliedVersions(ctx, pool)
	if err != nil {
		return nil, err
	}
	var pending []Migration
	for _, m := range all {
		if !done[m.Version] {
			pending = append(pending, m)
		}
	}
	return pending, nil
}

func appliedVersions(ctx context.Context, pool *pgxpool.Pool) (map[int]bool, error) {
	rows, err := pool.Query(ctx, "SELECT version FROM presenced_schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	defer rows.Close()
	done := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("read applied migrations: %w", err)
		}
		done[v] = true
	}
	return done, rows.Err()
}
