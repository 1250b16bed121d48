package faults_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/app/apptest"
	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

// saleConfig is one process of every role for the stores drills.
func saleConfig(t *testing.T) config.Config {
	cfg := apptest.Config(t)
	cfg.Roles = []string{"all"}
	cfg.Auth.JWTSecret = secret
	cfg.Auth.APIKey = "stores-api-key"
	cfg.Auth.DevSecrets = true
	cfg.HTTP.MaxConnectionsPerIP = 0
	cfg.Booking.HoldsPerMinute = 100000
	cfg.Booking.HintClaimTTL = 5 * time.Second
	cfg.Waitingroom.TickInterval = 100 * time.Millisecond
	cfg.Payments.MonitorInterval = time.Second
	cfg.Postgres.ConnectWait = 30 * time.Second
	return cfg
}

// salePhase runs a sale of its own (event) for 1.5 s, injects the fault
// (inject returns once the fault is over and the store back), runs 2 s
// more, then lets every operation settle and checks the invariants.
func salePhase(t *testing.T, s *sale, event, fault string, inject func()) drillRow {
	s.create(event, 5)
	stop := make(chan struct{})
	buyers := s.run(stop)
	readers := s.readOwners(stop)
	time.Sleep(1500 * time.Millisecond)
	began := time.Now()
	inject()
	took := time.Since(began).Round(100 * time.Millisecond)
	s.faultEnded()
	time.Sleep(2 * time.Second)
	close(stop)
	buyers.Wait()
	readers.Wait()
	row := drillRow{fault: fault, duration: took, recovery: s.recovered(), answers: s.tally(), inv: s.check(), presence: "-"}
	t.Logf("%s: %s; %s", fault, row.answers, row.inv)
	return row
}

// requireSaleClean asserts the invariants of every row and of the run.
func requireSaleClean(t *testing.T, s *sale, rows []drillRow) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Empty(t, s.bad, "500s, 5xx other than 503, 503 without Retry-After, unexpected answers")
	require.Empty(t, s.unsettle, "operations without a definitive answer a minute after the fault")
	for _, r := range rows {
		require.Zero(t, r.inv.doubleOwners, r.fault)
		require.Zero(t, r.inv.doubleCharges, r.fault)
		require.Equal(t, "ok", r.inv.linearizable, "%s: the history of seat ownership is linearizable", r.fault)
	}
	require.NotEmpty(t, s.paid, "the drill paid for something")
}

// The sale on a three-master Redis Cluster with a replica per master: the
// master serving the event's keys is SIGKILLed mid-sale, the cluster
// promotes its replica (cluster-node-timeout 3 s), and the killed node
// comes back empty and rejoins as a replica.
func TestRedisClusterFailoverDrill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a six-node Redis Cluster and kills a master")
	}
	ctx := context.Background()
	rc, err := store.StartRedisClusterWithReplicas(ctx, t.TempDir(), 3, 60*time.Second)
	require.NoError(t, err)
	t.Cleanup(rc.Stop)
	cfg := saleConfig(t)
	cfg.Redis.URL = store.RedisClusterURL(rc.Addrs)
	cfg.Redis.Cluster = true
	cfg.Redis.Prefix = "cl:"
	srv := apptest.StartUnchecked(t, cfg)
	db, err := pgxpool.New(ctx, cfg.Postgres.URL)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	s := newSale(t, func() string { return srv.URL }, cfg.Auth.APIKey, secret, "cl", db, 12)

	var rows []drillRow
	defer func() { printTable(t, "Redis Cluster (3 masters, 3 replicas) (TestRedisClusterFailoverDrill)", rows) }()
	rows = append(rows, salePhase(t, s, "cl-0", "none (baseline)", func() { time.Sleep(3 * time.Second) }))
	rows = append(rows, salePhase(t, s, "cl-1", "master of the event's slot SIGKILLed, its replica promoted", func() {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs})
		slot := int(cc.ClusterKeySlot(ctx, "{event:cl-1}").Val())
		cc.Close()
		victim, err := rc.MasterOf(ctx, slot)
		require.NoError(t, err)
		pid := redisPID(t, "redis://"+rc.Addrs[victim])
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		// Wait for the promotion: another node serves the slot.
		testenv.Eventually(t, 60*time.Second, func() bool {
			m, err := rc.MasterOf(ctx, slot)
			return err == nil && m != victim
		}, "a replica promoted for slot %d", slot)
		require.NoError(t, rc.RestartNode(ctx, victim))
	}))
	requireSaleClean(t, s, rows)
	requireCheckClean(t, srv, db)
}

// The sale on PostgreSQL with a streaming replica and a pooler: the
// pooler (PgBouncer, transaction mode) restarted mid-sale; then a
// switchover: the primary stopped, the replica promoted and the database's
// address (a proxy standing for the virtual IP or DNS name a failover
// moves) pointed at it. The browse plane reads the replica throughout.
func TestPostgresClusterDrill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL primary, a replica and a pooler, and fails over")
	}
	ctx := context.Background()
	dir := t.TempDir()
	primary, err := store.StartEmbeddedPostgres(ctx, filepath.Join(dir, "primary"), "", testenv.Logger())
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Stop() })
	admin, err := pgxpool.New(ctx, primary.AdminURL())
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "ALTER DATABASE "+store.DevDatabase+" SET synchronous_commit = on")
	admin.Close()
	require.NoError(t, err)
	replica, err := primary.StartReplica(ctx, filepath.Join(dir, "replica"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = replica.Stop() })

	vip := testenv.NewFaultProxy(t, fmt.Sprintf("127.0.0.1:%d", primary.Port))
	mainURL := vip.Via(primary.URL(store.DevOwner))
	pooler := testenv.NewPgBouncer(t, mainURL, "transaction", 20)

	cfg := saleConfig(t)
	cfg.Redis.URL = testenv.NewRedisServer(t).URL
	cfg.Postgres.URL = pooler.URL
	cfg.Postgres.QueryExecMode = "cache_describe"
	cfg.Postgres.WebhookURL = mainURL // the money path keeps off the shared pooler
	cfg.Postgres.ReadOnlyURL = replica.URL(store.DevReadOnlyLogin)
	srv := apptest.StartUnchecked(t, cfg)
	db, err := pgxpool.New(ctx, mainURL)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	s := newSale(t, func() string { return srv.URL }, cfg.Auth.APIKey, secret, "pg", db, 12)

	var rows []drillRow
	defer func() {
		printTable(t, "PostgreSQL primary, streaming replica and PgBouncer (TestPostgresClusterDrill)", rows)
	}()
	rows = append(rows, salePhase(t, s, "pg-0", "PgBouncer restarted (SIGTERM, down 1 s)", func() {
		pooler.Restart(time.Second)
	}))
	rows = append(rows, salePhase(t, s, "pg-1", "switchover: primary stopped, replica promoted, address moved", func() {
		require.NoError(t, primary.Stop())
		require.NoError(t, replica.Promote(ctx))
		vip.Retarget(fmt.Sprintf("127.0.0.1:%d", replica.Port))
	}))
	requireSaleClean(t, s, rows)
	requireCheckClean(t, srv, db)
}

// Waiting-room rooms and lines live in Redis only. With Redis persisting
// every write (appendonly, appendfsync always) a crash and restart keeps
// them: the room, who is admitted (and their passes), who waits and in
// what order. Without persistence the restart loses them all (the room
// answers 404 until its settings are applied again), as docs/waitingroom.md
// says.
func TestWaitingRoomSurvivesRedisRestartWithAOF(t *testing.T) {
	if testing.Short() {
		t.Skip("crashes and restarts redis-server")
	}
	for _, aof := range []bool{true, false} {
		t.Run(fmt.Sprintf("appendonly=%t", aof), func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			port, err := store.FreePort()
			require.NoError(t, err)
			opt := store.RedisServerOptions{Port: port, Dir: dir}
			if aof {
				opt.Args = []string{"--appendonly", "yes", "--appendfsync", "always"}
			}
			rds, err := store.StartRedisServer(ctx, opt)
			require.NoError(t, err)
			t.Cleanup(func() { _ = rds.Stop() })

			cfg := saleConfig(t)
			cfg.Roles = []string{"admit", "worker"}
			cfg.Redis.URL = rds.URL
			srv := apptest.StartUnchecked(t, cfg)
			admin := map[string]string{"X-API-Key": cfg.Auth.APIKey}
			a := do("PUT", srv.URL+"/v1/admin/waitingrooms/aof", admin, `{"capacity":2,"batch":2,"leaseSeconds":1800,"heartbeatTimeoutSeconds":600}`)
			require.Equal(t, 201, a.code, "%s", a.body)
			s := newSale(t, func() string { return srv.URL }, cfg.Auth.APIKey, secret, "aof", nil, 6)
			status := func(b *saleBuyer) (string, int, int) {
				a := do("GET", srv.URL+"/v1/waitingroom/aof/status", s.userHdr(b), "")
				var st struct {
					State    string
					Position int
				}
				_ = json.Unmarshal(a.body, &st)
				return st.State, st.Position, a.code
			}
			for _, b := range s.buyers {
				a := do("POST", srv.URL+"/v1/waitingroom/aof/join", s.userHdr(b), "")
				require.Equal(t, 200, a.code, "%s", a.body)
				time.Sleep(20 * time.Millisecond) // a line in join order
			}
			before := map[string]string{}
			testenv.Eventually(t, 30*time.Second, func() bool {
				admitted := 0
				for _, b := range s.buyers {
					state, pos, _ := status(b)
					before[b.user] = fmt.Sprintf("%s %d", state, pos)
					if state == "admitted" {
						admitted++
					}
				}
				return admitted == 2
			}, "two of six admitted, four in line")

			require.NoError(t, syscall.Kill(redisPID(t, rds.URL), syscall.SIGKILL))
			time.Sleep(500 * time.Millisecond)
			rds, err = store.StartRedisServer(ctx, opt)
			require.NoError(t, err)
			t.Cleanup(func() { _ = rds.Stop() })

			after := map[string]string{}
			var code int
			testenv.Eventually(t, 30*time.Second, func() bool {
				for _, b := range s.buyers {
					var state string
					var pos int
					state, pos, code = status(b)
					if code == 503 {
						return false // reconnecting
					}
					after[b.user] = fmt.Sprintf("%s %d", state, pos)
				}
				return true
			}, "the line answers after the restart")
			t.Logf("before the crash %v, after the restart %v", before, after)
			if aof {
				require.Equal(t, before, after, "every place in line and every admission kept")
				a = do("GET", srv.URL+"/v1/admin/waitingrooms/aof", admin, "")
				require.Equal(t, 200, a.code, "%s", a.body)
				return
			}
			require.Equal(t, 404, code, "without persistence the room is gone")
			a = do("GET", srv.URL+"/v1/admin/waitingrooms/aof", admin, "")
			require.Equal(t, 404, a.code, "%s", a.body)
		})
	}
}
