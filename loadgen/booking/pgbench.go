package booking

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The hold rate's same-minute ceiling: PostgreSQL's own speed on this
// machine at this moment, pgbench's TPC-B-like transactions, run on the
// same server right before and right after the holds. A ratio against a
// pgbench of another sitting says nothing (other builds on the cores, a
// colder cache).

// pgbenchLoad is the ceiling's workload: the issue's, fixed so that every
// ratio is against the same thing.
var pgbenchLoad = []string{"-c", "8", "-j", "2", "-b", "tpcb-like", "-T", "10"}

// pgbenchTimeout bounds one pgbench run (10 s of load, its connections,
// and an initialisation).
const pgbenchTimeout = 2 * time.Minute

// ceiling runs pgbench against its own database on the holds' server.
type ceiling struct {
	bin string // pgbench
	url string // its database
}

// resolvePgbench finds the pgbench to run: "auto" is the one on PATH, any
// other value a path to it.
func resolvePgbench(flag string, lookPath func(string) (string, error)) (string, error) {
	name := flag
	if flag == "auto" {
		name = "pgbench"
	}
	bin, err := lookPath(name)
	if err != nil {
		return "", fmt.Errorf("--pgbench %s: %w", flag, err)
	}
	return bin, nil
}

// pgbenchDatabaseURL is the database of pgbench on the server of dsn: the
// same server, user and options, the database named name.
func pgbenchDatabaseURL(dsn, name string) (string, error) {
	if name == "" || strings.ContainsAny(name, "/?#") {
		return "", fmt.Errorf("--pgbench-database %q: not a database name", name)
	}
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		// A key=value string: a later keyword overrides an earlier one.
		return dsn + " dbname=" + name, nil
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("--postgres-url: %w", err)
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String(), nil
}

// tpsLine is the throughput line of pgbench's report, "tps = 2685.123456
// (without initial connection time)" (older releases say "excluding
// connections establishing" and print an "including" line first).
var tpsLine = regexp.MustCompile(`(?m)^tps = ([0-9]+(?:\.[0-9]+)?) \((?:without initial connection time|excluding connections establishing)\)`)

// parseTPS reads the transactions per second of a pgbench report.
func parseTPS(out string) (float64, error) {
	m := tpsLine.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("pgbench printed no tps line:\n%s", strings.TrimSpace(out))
	}
	return strconv.ParseFloat(m[1], 64)
}

// ceilingFigure is the report: the holds' rate against the mean of the
// two pgbench runs, and against each.
func ceilingFigure(holdsPerSecond, before, after float64) string {
	if before <= 0 || after <= 0 {
		return fmt.Sprintf("holds %.1f/s; pgbench before %.1f tps, after %.1f tps: no ratio", holdsPerSecond, before, after)
	}
	mean := (before + after) / 2
	return fmt.Sprintf("holds %.1f/s, pgbench %.1f tps before and %.1f tps after: ratio %.2f of their mean (%.2f, %.2f)",
		holdsPerSecond, before, after, holdsPerSecond/mean, holdsPerSecond/before, holdsPerSecond/after)
}

// prepare creates pgbench's database on the server of dsn and initialises
// it (pgbench -i) when it is missing or holds no pgbench tables; a
// database already initialised is used as it is.
func (c *ceiling) prepare(ctx context.Context, dsn, name string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("pgbench database: %w", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("pgbench database: %w", err)
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return fmt.Errorf("create pgbench database: %w", err)
		}
	}
	bench, err := pgx.Connect(ctx, c.url)
	if err != nil {
		return fmt.Errorf("pgbench database: %w", err)
	}
	defer bench.Close(ctx)
	var initialised bool
	if err := bench.QueryRow(ctx, `SELECT to_regclass('pgbench_branches') IS NOT NULL`).Scan(&initialised); err != nil {
		return fmt.Errorf("pgbench database: %w", err)
	}
	if initialised {
		return nil
	}
	_, err = c.run(ctx, "-i", "-q", c.url)
	return err
}

// measure runs the ceiling's workload once and returns its tps.
func (c *ceiling) measure(ctx context.Context) (float64, error) {
	out, err := c.run(ctx, append(append([]string(nil), pgbenchLoad...), c.url)...)
	if err != nil {
		return 0, err
	}
	return parseTPS(out)
}

func (c *ceiling) run(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, pgbenchTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.bin, args...).CombinedOutput()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return "", fmt.Errorf("pgbench %s: %w:\n%s", args[0], err, strings.TrimSpace(string(out)))
		}
		return "", fmt.Errorf("pgbench: %w", err)
	}
	return string(out), nil
}
