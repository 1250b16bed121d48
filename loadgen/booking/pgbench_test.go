package booking

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// --pgbench names the pgbench to run ("auto": the one on PATH) and
// --pgbench-database its database, next to the holds' on one server.
func TestPgbenchFlags(t *testing.T) {
	s := New()
	fs := pflag.NewFlagSet("booking", pflag.ContinueOnError)
	s.Flags(fs)
	require.NoError(t, fs.Parse(nil))
	require.Empty(t, s.pgbench, "off unless asked for")
	require.Equal(t, "loadgen_pgbench", s.pgbenchDB)
	require.NoError(t, fs.Parse([]string{"--pgbench", "auto", "--pgbench-database", "ceiling"}))
	require.Equal(t, "auto", s.pgbench)
	require.Equal(t, "ceiling", s.pgbenchDB)

	var looked []string
	look := func(name string) (string, error) {
		looked = append(looked, name)
		if name == "/opt/pg/bin/pgbench" || name == "pgbench" {
			return "/found/" + name, nil
		}
		return "", exec.ErrNotFound
	}
	bin, err := resolvePgbench("auto", look)
	require.NoError(t, err)
	require.Equal(t, "/found/pgbench", bin)
	bin, err = resolvePgbench("/opt/pg/bin/pgbench", look)
	require.NoError(t, err)
	require.Equal(t, "/found//opt/pg/bin/pgbench", bin)
	_, err = resolvePgbench("/nowhere/pgbench", look)
	require.True(t, errors.Is(err, exec.ErrNotFound), "%v", err)
	require.ErrorContains(t, err, "--pgbench /nowhere/pgbench")
	require.Equal(t, []string{"pgbench", "/opt/pg/bin/pgbench", "/nowhere/pgbench"}, looked)
}

// pgbench's database is the holds' server, user and options with another
// database name, whichever form the URL has.
func TestPgbenchDatabaseURL(t *testing.T) {
	u, err := pgbenchDatabaseURL("postgres://owner:s3cret@127.0.0.1:5433/presenced?sslmode=disable", "loadgen_pgbench")
	require.NoError(t, err)
	require.Equal(t, "postgres://owner:s3cret@127.0.0.1:5433/loadgen_pgbench?sslmode=disable", u)
	u, err = pgbenchDatabaseURL("postgresql://127.0.0.1/", "bench")
	require.NoError(t, err)
	require.Equal(t, "postgresql://127.0.0.1/bench", u)
	u, err = pgbenchDatabaseURL("host=/tmp port=5433 dbname=presenced user=owner", "bench")
	require.NoError(t, err)
	require.Equal(t, "host=/tmp port=5433 dbname=presenced user=owner dbname=bench", u)
	for _, bad := range []string{"", "a/b", "x?y"} {
		_, err := pgbenchDatabaseURL("postgres://127.0.0.1/presenced", bad)
		require.Error(t, err, bad)
	}
	require.Equal(t, []string{"-c", "8", "-j", "2", "-b", "tpcb-like", "-T", "10"}, pgbenchLoad, "the issue's workload")
}

// The tps of a pgbench report, as PostgreSQL 14 and later print it and as
// 13 and earlier did; a report without it is an error.
func TestParseTPS(t *testing.T) {
	const v16 = `pgbench (16.4)
starting vacuum...end.
transaction type: <builtin: TPC-B (sort of)>
scaling factor: 1
number of clients: 8
number of threads: 2
duration: 10 s
number of transactions actually processed: 26853
latency average = 2.979 ms
initial connection time = 12.611 ms
tps = 2685.304142 (without initial connection time)
`
	tps, err := parseTPS(v16)
	require.NoError(t, err)
	require.InDelta(t, 2685.304142, tps, 1e-9)

	const v13 = `latency average = 3.100 ms
tps = 2580.100000 (including connections establishing)
tps = 2591.250000 (excluding connections establishing)
`
	tps, err = parseTPS(v13)
	require.NoError(t, err)
	require.InDelta(t, 2591.25, tps, 1e-9)

	_, err = parseTPS("pgbench: error: connection to server failed\n")
	require.ErrorContains(t, err, "no tps line")
}

// The report: the holds' rate, both pgbench runs, the ratio to their mean
// and to each.
func TestCeilingFigure(t *testing.T) {
	require.Equal(t,
		"holds 1200.0/s, pgbench 2800.0 tps before and 3200.0 tps after: ratio 0.40 of their mean (0.43, 0.38)",
		ceilingFigure(1200, 2800, 3200))
	require.Equal(t, "holds 1200.0/s; pgbench before 0.0 tps, after 3200.0 tps: no ratio", ceilingFigure(1200, 0, 3200))
}

// The ceiling's database is created on the holds' server and initialised
// once: a second run finds it ready and does not initialise it again.
func TestCeilingPreparesItsDatabaseOnce(t *testing.T) {
	bin, err := exec.LookPath("pgbench")
	if err != nil {
		t.Skip("no pgbench on PATH")
	}
	ctx := context.Background()
	dsn := testenv.NewDatabase(t)
	name := fmt.Sprintf("pgbench_%d", time.Now().UnixNano())
	u, err := pgbenchDatabaseURL(dsn, name)
	require.NoError(t, err)
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), dsn)
		if err == nil {
			_, _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
			_ = conn.Close(context.Background())
		}
	})
	c := &ceiling{bin: bin, url: u}
	require.NoError(t, c.prepare(ctx, dsn, name))
	bench, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer bench.Close(ctx)
	var branches int
	require.NoError(t, bench.QueryRow(ctx, `SELECT count(*) FROM pgbench_branches`).Scan(&branches))
	require.Equal(t, 1, branches, "initialised at scale 1")
	_, err = bench.Exec(ctx, `UPDATE pgbench_branches SET bbalance = 42`)
	require.NoError(t, err)

	require.NoError(t, c.prepare(ctx, dsn, name))
	var balance int
	require.NoError(t, bench.QueryRow(ctx, `SELECT bbalance FROM pgbench_branches`).Scan(&balance))
	require.Equal(t, 42, balance, "not initialised again")
}
