package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/store"
)

var (
	redisOnce sync.Once
	redisURL  string
	redisErr  error
	redisSrv  *store.EmbeddedRedis

	clusterOnce  sync.Once
	clusterAddrs []string
	clusterErr   error
)

const installRedis = "install redis-server (apt-get install redis-server) or set PRESENCED_TEST_REDIS_URL"

// RedisURL is the URL of this test binary's Redis.
func RedisURL(t testing.TB) string {
	t.Helper()
	redisOnce.Do(func() {
		if u := os.Getenv("PRESENCED_TEST_REDIS_URL"); u != "" {
			redisURL = u
			return
		}
		if _, err := exec.LookPath("redis-server"); err != nil {
			redisErr = fmt.Errorf("tests need a real Redis: %s", installRedis)
			return
		}
		redisSrv, redisErr = store.StartRedisServer(context.Background(), store.RedisServerOptions{})
		if redisErr == nil {
			redisURL = redisSrv.URL
			atExit(func() { _ = redisSrv.Stop() })
		}
	})
	if redisErr != nil {
		t.Fatalf("redis: %v", redisErr)
	}
	return redisURL
}

// RedisServer is the private redis-server of this binary, for tests that
// stop and restart it; it fails when an external Redis is configured.
func RedisServer(t testing.TB) *store.EmbeddedRedis {
	t.Helper()
	RedisURL(t)
	if redisSrv == nil {
		t.Fatalf("this test controls the Redis process and cannot use PRESENCED_TEST_REDIS_URL")
	}
	return redisSrv
}

// Redis returns a client of the single-node test Redis, closed at test end.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(RedisURL(t))
	if err != nil {
		t.Fatalf("redis url: %v", err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// NewRedisServer starts a redis-server owned by the calling test, for tests
// that stop Redis mid-way; it is stopped at test end.
func NewRedisServer(t testing.TB) *store.EmbeddedRedis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("this test needs redis-server: %s", installRedis)
	}
	srv, err := store.StartRedisServer(context.Background(), store.RedisServerOptions{})
	if err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	return srv
}

// RedisClient is a client of the Redis at url (a server of the test's own),
// with options changed by mutate, closed at test end.
func RedisClient(t testing.TB, url string, mutate ...func(*redis.Options)) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("redis url: %v", err)
	}
	for _, f := range mutate {
		f(opt)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// RestartRedisServer starts an empty redis-server on the port of url, one
// the test stopped, so clients come back to the address they knew; it is
// stopped at test end.
func RestartRedisServer(t testing.TB, url string) *store.EmbeddedRedis {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("redis url: %v", err)
	}
	_, p, err := net.SplitHostPort(opt.Addr)
	if err != nil {
		t.Fatalf("redis address: %v", err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("redis port: %v", err)
	}
	srv, err := store.StartRedisServer(context.Background(), store.RedisServerOptions{Port: port})
	if err != nil {
		t.Fatalf("restart redis-server: %v", err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	return srv
}

// RedisClusterURL is a cluster URL (redis://a?addr=b&addr=c) of this test
// binary's three-node Redis Cluster.
func RedisClusterURL(t testing.TB) string {
	t.Helper()
	clusterOnce.Do(func() {
		if u := os.Getenv("PRESENCED_TEST_REDIS_CLUSTER_URL"); u != "" {
			opt, err := redis.ParseClusterURL(u)
			if err != nil {
				clusterErr = err
				return
			}
			clusterAddrs = opt.Addrs
			return
		}
		clusterErr = startCluster()
	})
	if clusterErr != nil {
		t.Fatalf("redis cluster: %v", clusterErr)
	}
	return store.RedisClusterURL(clusterAddrs)
}

// RedisCluster returns a client of the test cluster, closed at test end.
func RedisCluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	opt, err := redis.ParseClusterURL(RedisClusterURL(t))
	if err != nil {
		t.Fatalf("cluster url: %v", err)
	}
	c := redis.NewClusterClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func startCluster() error {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return fmt.Errorf("tests need a real Redis Cluster: %s", installRedis)
	}
	base, err := os.MkdirTemp("", "presenced-cluster-")
	if err != nil {
		return err
	}
	atExit(func() { _ = os.RemoveAll(base) })
	rc, err := store.StartRedisCluster(context.Background(), base, 3, 30*time.Second)
	if err != nil {
		return err
	}
	atExit(rc.Stop)
	clusterAddrs = rc.Addrs
	return nil
}
