package store_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestKeysShareOneSlotPerEntity(t *testing.T) {
	t.Parallel()
	ks := store.NewKeyspace("pd:")
	h := ks.Entity("hotel", "h42")
	require.Equal(t, "pd:{hotel:h42}", h.String())
	require.Equal(t, "pd:{hotel:h42}:shard:3:bucket:17", h.Key("shard", "3", "bucket", "17"))
	require.Equal(t, h.Key("rooms"), ks.EntityKey("hotel", "h42", "rooms"))

	c := testenv.RedisCluster(t)
	ctx := context.Background()
	s1, err := c.ClusterKeySlot(ctx, h.Key("a")).Result()
	require.NoError(t, err)
	s2, err := c.ClusterKeySlot(ctx, h.Key("b", "c", "d")).Result()
	require.NoError(t, err)
	require.Equal(t, s1, s2)
}

func TestScriptRunsAfterScriptFlush(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	ctx := context.Background()
	s := store.NewScript("incr", "return redis.call('INCRBY', KEYS[1], ARGV[1])")
	key := testenv.Prefix(t) + "n"
	require.NoError(t, store.Load(ctx, rdb, s))
	n, err := s.Run(ctx, rdb, []string{key}, 2).Int()
	require.NoError(t, err)
	require.Equal(t, 2, n)
	// A failed-over or restarted Redis forgets scripts: EVAL must take over.
	require.NoError(t, rdb.ScriptFlush(ctx).Err())
	n, err = s.Run(ctx, rdb, []string{key}, 3).Int()
	require.NoError(t, err)
	require.Equal(t, 5, n)

	cluster := testenv.RedisCluster(t)
	require.NoError(t, store.Load(ctx, cluster, s))
	n, err = s.Run(ctx, cluster, []string{store.NewKeyspace(testenv.Prefix(t)).Entity("e", "1").Key("n")}, 4).Int()
	require.NoError(t, err)
	require.Equal(t, 4, n)
}

// Several processes start together against one database: every migration
// must be applied exactly once.
func TestMigrationsApplyOnceUnderConcurrentStarts(t *testing.T) {
	t.Parallel()
	dsn := testenv.NewDatabase(t)
	ctx := context.Background()
	migrations := fstest.MapFS{
		// CREATE TABLE without IF NOT EXISTS fails if run twice.
		"0001_first.sql":  {Data: []byte("CREATE TABLE once_a (id int PRIMARY KEY); INSERT INTO once_a VALUES (1);")},
		"0002_second.sql": {Data: []byte("CREATE TABLE once_b (id int PRIMARY KEY); INSERT INTO once_b SELECT id FROM once_a;")},
	}
	const starters = 8
	var wg sync.WaitGroup
	applied := make([][]int, starters)
	errs := make([]error, starters)
	for i := 0; i < starters; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			pool, err := pgxpool.New(ctx, dsn)
			if err != nil {
				errs[i] = err
				return
			}
			defer pool.Close()
			applied[i], errs[i] = store.Migrate(ctx, pool, migrations, testenv.Logger())
		}(i)
	}
	wg.Wait()
	total := 0
	for i := range errs {
		require.NoError(t, errs[i])
		total += len(applied[i])
	}
	require.Equal(t, 2, total, "each migration applied by exactly one starter")

	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	defer pool.Close()
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM once_b").Scan(&n))
	require.Equal(t, 1, n)
	pending, err := store.PendingMigrations(ctx, pool, migrations)
	require.NoError(t, err)
	require.Empty(t, pending)
}

func TestEmbeddedMigrationsApply(t *testing.T) {
	t.Parallel()
	pool := testenv.Postgres(t)
	pending, err := store.PendingMigrations(context.Background(), pool, store.Migrations())
	require.NoError(t, err)
	require.Empty(t, pending)
	all, err := store.ReadMigrations(store.Migrations())
	require.NoError(t, err)
	require.NotEmpty(t, all)
}

func TestBadMigrationNames(t *testing.T) {
	t.Parallel()
	_, err := store.ReadMigrations(fstest.MapFS{"first.sql": {Data: []byte("SELECT 1")}})
	require.ErrorContains(t, err, "NNNN_name.sql")
	_, err = store.ReadMigrations(fstest.MapFS{"0001_a.sql": {}, "001_b.sql": {}})
	require.ErrorContains(t, err, "share version 1")
}

func TestFindPostgresBinariesExplainsWhatIsMissing(t *testing.T) {
	t.Parallel()
	_, err := store.FindPostgresBinaries(t.TempDir())
	require.ErrorContains(t, err, "holds no initdb")
	dir, err := store.FindPostgresBinaries("")
	require.NoError(t, err, "this machine kind has the PostgreSQL server binaries")
	_, err = os.Stat(filepath.Join(dir, "initdb"))
	require.NoError(t, err)
}

func TestRedact(t *testing.T) {
	t.Parallel()
	require.Equal(t, "postgres://u:xxxxx@h:5432/db", store.Redact("postgres://u:secret@h:5432/db"))
	require.Equal(t, "redis://h:6379", store.Redact("redis://h:6379"))
}

func TestLeaseHasOneHolder(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	ctx := context.Background()
	key := store.NewKeyspace(testenv.Prefix(t)).Entity("event", "e1").Key("tick")
	a := store.NewLease(rdb, key, time.Second)
	b := store.NewLease(rdb, key, time.Second)
	ok, err := a.TryAcquire(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = b.TryAcquire(ctx)
	require.NoError(t, err)
	require.False(t, ok, "held by a")
	ok, err = a.TryAcquire(ctx)
	require.NoError(t, err)
	require.True(t, ok, "a renews")
	require.NoError(t, b.Release(ctx))
	ok, _ = b.TryAcquire(ctx)
	require.False(t, ok, "b's release did not free a's lease")
	require.NoError(t, a.Release(ctx))
	ok, _ = b.TryAcquire(ctx)
	require.True(t, ok, "free after a released")
}

// Many leases in one pipeline across slots, with a script cache Redis has
// just flushed (the NOSCRIPT path of Pipelined).
func TestAcquireLeasesInOnePipeline(t *testing.T) {
	t.Parallel()
	for name, rdb := range map[string]redis.UniversalClient{"single": testenv.Redis(t), "cluster": testenv.RedisCluster(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			ks := store.NewKeyspace(testenv.Prefix(t))
			keys := []string{ks.Entity("hotel", "a").Key("lease"), ks.Entity("hotel", "b").Key("lease"), ks.Entity("hotel", "c").Key("lease")}
			require.NoError(t, rdb.ScriptFlush(ctx).Err())
			held, err := store.AcquireLeases(ctx, rdb, keys[:2], "other", time.Minute)
			require.NoError(t, err)
			require.Equal(t, []bool{true, true}, held)
			held, err = store.AcquireLeases(ctx, rdb, keys, "me", time.Minute)
			require.NoError(t, err)
			require.Equal(t, []bool{false, false, true}, held, "only the free lease is taken")
			held, err = store.AcquireLeases(ctx, rdb, keys, "me", time.Minute)
			require.NoError(t, err)
			require.Equal(t, []bool{false, false, true}, held, "ours is renewed")
		})
	}
}

func TestAdvisoryLockHasOneHolder(t *testing.T) {
	t.Parallel()
	pool := testenv.Postgres(t)
	ctx := context.Background()
	name := t.Name()
	l1, err := store.TryAdvisoryLock(ctx, pool, name)
	require.NoError(t, err)
	require.NotNil(t, l1)
	l2, err := store.TryAdvisoryLock(ctx, pool, name)
	require.NoError(t, err)
	require.Nil(t, l2)
	require.True(t, l1.Alive(ctx))
	l1.Release()
	l3, err := store.TryAdvisoryLock(ctx, pool, name)
	require.NoError(t, err)
	require.NotNil(t, l3)
	l3.Release()
}

// Every port FreePort hands out can host a Redis Cluster node: Redis
// refuses ports above 55535 because the node's bus listens on port + 10000,
// and both stay below the kernels' ephemeral ranges (from 32768), where
// any outgoing connection could take them. (That they are free is checked
// in the package's own test: another process may take one at any time.)
func TestFreePortSuitsARedisClusterNode(t *testing.T) {
	t.Parallel()
	for i := 0; i < 200; i++ {
		p, err := store.FreePort()
		require.NoError(t, err)
		require.GreaterOrEqual(t, p, 1024)
		require.Less(t, p+10000, 32768)
	}
}

// Cluster nodes start every time, several at once.
func TestRedisClusterNodesStart(t *testing.T) {
	t.Parallel()
	testenv.RedisURL(t) // the install hint when redis-server is missing
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			srv, err := store.StartRedisServer(context.Background(), store.RedisServerOptions{
				Dir: t.TempDir(), Args: []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"},
			})
			if err == nil {
				err = srv.Stop()
			}
			errs[i] = err
		}(i)
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
}

// A server that refuses to start says why: its own log lines end the error.
func TestRedisStartErrorCarriesTheServerLog(t *testing.T) {
	t.Parallel()
	testenv.RedisURL(t)
	_, err := store.StartRedisServer(context.Background(), store.RedisServerOptions{
		Dir: t.TempDir(), Args: []string{"--no-such-directive", "yes"},
	})
	require.ErrorContains(t, err, "Bad directive")

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	_, err = store.StartRedisServer(context.Background(), store.RedisServerOptions{Port: taken.Addr().(*net.TCPAddr).Port})
	require.ErrorContains(t, err, "Address already in use", "a port the caller chose is not retried")
}
