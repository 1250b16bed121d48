package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/presenced/presenced/store"
)

var (
	pgOnce     sync.Once
	pgAdminURL string
	pgErr      error
	pgServer   *store.EmbeddedPostgres

	replicaOnce sync.Once
	replica     *store.EmbeddedPostgres
	replicaErr  error

	pkgDBOnce sync.Once
	pkgDBURL  string
	pkgDBErr  error

	templateOnce sync.Once
	templateName string
	templateErr  error

	poolOnce sync.Once
	pool     *pgxpool.Pool
	poolErr  error
)

// poolMaxConns sizes the package's shared pool: enough for the parallel
// tests of one package (races of many buyers included), far below the
// test server's max_connections, which every package's own pools and the
// apps its tests start share.
const poolMaxConns = 32

func adminURL(t testing.TB) string {
	t.Helper()
	pgOnce.Do(func() {
		if u := os.Getenv("PRESENCED_TEST_POSTGRES_URL"); u != "" {
			pgAdminURL = u
			return
		}
		reapOrphanedServers()
		dir, err := os.MkdirTemp("", "presenced-pg-")
		if err != nil {
			pgErr = err
			return
		}
		ep, err := store.StartEmbeddedPostgres(context.Background(), dir, "", Logger())
		if err != nil {
			pgErr = fmt.Errorf("tests need a real PostgreSQL (set PRESENCED_TEST_POSTGRES_URL or install the server binaries): %w", err)
			_ = os.RemoveAll(dir)
			return
		}
		atExit(func() {
			_ = ep.Stop()
			_ = os.RemoveAll(dir)
		})
		pgAdminURL = ep.AdminURL()
		pgServer = ep
	})
	if pgErr != nil {
		t.Fatalf("postgres: %v", pgErr)
	}
	return pgAdminURL
}

// reapOrphanedServers stops the private servers of test binaries that died
// without stopping them (past go test's -timeout, or killed) and removes
// their folders; on a machine that runs the suite often they would
// otherwise pile up, each holding its memory. A folder changed in the last
// minute may belong to a binary that has not taken its users lock yet.
func reapOrphanedServers() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "presenced-pg-[0-9]*"))
	for _, dir := range dirs {
		st, err := os.Stat(dir)
		if err != nil || time.Since(st.ModTime()) < time.Minute {
			continue
		}
		if free, err := store.ReapEmbeddedPostgres(dir); err == nil && free {
			_ = os.RemoveAll(dir)
		}
	}
}

// NewDatabase creates an empty database, dropped when the test binary exits,
// and returns its DSN.
func NewDatabase(t testing.TB) string {
	t.Helper()
	url, err := newDatabase(adminURL(t))
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	return url
}

func newDatabase(admin string) (string, error) {
	name, err := createDatabase(admin, "")
	if err != nil {
		return "", err
	}
	return withDatabase(admin, name)
}

// createDatabase creates a database, empty or a copy of template, dropped
// when the test binary exits, and returns its name.
func createDatabase(admin, template string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", fmt.Errorf("connect admin: %w", err)
	}
	defer conn.Close(ctx)
	// The browse plane's SELECT-only login must exist before migrating, so
	// the first migration grants it read access.
	if err := store.EnsureReadOnlyLogin(ctx, conn, store.DevReadOnlyLogin); err != nil {
		return "", err
	}
	name := fmt.Sprintf("presenced_test_%d_%d", os.Getpid(), seq.Add(1))
	sql := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		sql += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	if _, err := conn.Exec(ctx, sql); err != nil {
		return "", fmt.Errorf("create database: %w", err)
	}
	atExit(func() { dropDatabase(admin, name) })
	return name, nil
}

func dropDatabase(admin, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if c, err := pgx.Connect(ctx, admin); err == nil {
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		_ = c.Close(ctx)
	}
}

// OwnPostgresURL is the DSN of a migrated database of the test's own, for
// tests that run whole processes. A process's singleton loops (the outbox
// relay, the viewers controller) elect their leader with a database-wide
// advisory lock: in a database shared by parallel tests, another test's
// process could win it and publish this test's events into its own Redis
// keys; and loops that serve every row of their database (payment
// deliveries, notifications) would serve other tests' rows. Each database
// is a copy of one migrated once per test binary,
// which takes a fraction of a second instead of a migration run.
func OwnPostgresURL(t testing.TB) string {
	t.Helper()
	admin := adminURL(t)
	templateOnce.Do(func() { templateName, templateErr = migratedTemplate(admin) })
	if templateErr != nil {
		t.Fatalf("postgres template: %v", templateErr)
	}
	name, err := createDatabase(admin, templateName)
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	t.Cleanup(func() { dropDatabase(admin, name) })
	url, err := withDatabase(admin, name)
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	return url
}

// migratedTemplate creates and migrates the database OwnPostgresURL copies,
// then closes it to connections: CREATE DATABASE refuses a template that
// anyone is connected to.
func migratedTemplate(admin string) (string, error) {
	name, err := createDatabase(admin, "")
	if err != nil {
		return "", err
	}
	url, err := withDatabase(admin, name)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return "", err
	}
	_, err = store.Migrate(ctx, pool, store.Migrations(), Logger())
	pool.Close()
	if err != nil {
		return "", err
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", fmt.Errorf("connect admin: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH ALLOW_CONNECTIONS false"); err != nil {
		return "", fmt.Errorf("close template: %w", err)
	}
	return name, nil
}

func withDatabase(dsn, db string) (string, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return "", err
	}
	c := cfg.ConnConfig
	pw := ""
	if c.Password != "" {
		pw = ":" + c.Password
	}
	return fmt.Sprintf("postgres://%s%s@%s:%d/%s?sslmode=disable", c.User, pw, c.Host, c.Port, db), nil
}

// PostgresURL is the DSN of this package's database, fresh for the test
// binary and migrated to the current schema.
func PostgresURL(t testing.TB) string {
	t.Helper()
	admin := adminURL(t)
	pkgDBOnce.Do(func() {
		pkgDBURL, pkgDBErr = newDatabase(admin)
		if pkgDBErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		pool, err := pgxpool.New(ctx, pkgDBURL)
		if err != nil {
			pkgDBErr = err
			return
		}
		defer pool.Close()
		_, pkgDBErr = store.Migrate(ctx, pool, store.Migrations(), Logger())
	})
	if pkgDBErr != nil {
		t.Fatalf("postgres: %v", pkgDBErr)
	}
	return pkgDBURL
}

// Postgres returns the pool of this package's migrated database. It is one
// pool per test binary, made on first use and closed when the binary exits:
// tests must not close it, and a helper may call Postgres as often as it
// likes without opening connections. Tests share the database: use ids
// unique to the test.
func Postgres(t testing.TB) *pgxpool.Pool {
	t.Helper()
	url := PostgresURL(t)
	poolOnce.Do(func() {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			poolErr = err
			return
		}
		cfg.MaxConns = poolMaxConns
		if pool, poolErr = pgxpool.NewWithConfig(context.Background(), cfg); poolErr == nil {
			atExit(pool.Close)
		}
	})
	if poolErr != nil {
		t.Fatalf("postgres pool: %v", poolErr)
	}
	return pool
}

// ReadOnlyURL is the DSN of this package's database for the SELECT-only
// login (trust authentication on the test servers).
func ReadOnlyURL(t testing.TB) string {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(PostgresURL(t))
	if err != nil {
		t.Fatalf("postgres url: %v", err)
	}
	c := cfg.ConnConfig
	return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", store.DevReadOnlyLogin, c.Host, c.Port, c.Database)
}

// PostgresAdminURL is the admin DSN of the test server.
func PostgresAdminURL(t testing.TB) string {
	return adminURL(t)
}

// Replica is a streaming replica of this binary's test server, made with
// pg_basebackup from the local binaries on first use and stopped when the
// binary exits. It serves every test database, this package's included.
func Replica(t testing.TB) *store.EmbeddedPostgres {
	t.Helper()
	adminURL(t)
	if pgServer == nil {
		t.Fatalf("this test starts a replica of the test server and cannot use PRESENCED_TEST_POSTGRES_URL")
	}
	replicaOnce.Do(func() {
		dir, err := os.MkdirTemp("", "presenced-pg-replica-")
		if err != nil {
			replicaErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		replica, replicaErr = pgServer.StartReplica(ctx, dir)
		if replicaErr != nil {
			_ = os.RemoveAll(dir)
			return
		}
		atExit(func() {
			_ = replica.Stop()
			_ = os.RemoveAll(dir)
		})
	})
	if replicaErr != nil {
		t.Fatalf("postgres replica: %v", replicaErr)
	}
	return replica
}

// ReplicaURL is the DSN on the replica of the database primary names, for
// login (store.DevOwner or store.DevReadOnlyLogin).
func ReplicaURL(t testing.TB, primary, login string) string {
	t.Helper()
	rep := Replica(t)
	cfg, err := pgxpool.ParseConfig(primary)
	if err != nil {
		t.Fatalf("postgres url: %v", err)
	}
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", login, rep.Port, cfg.ConnConfig.Database)
}
