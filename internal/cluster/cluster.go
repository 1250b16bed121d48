// Package cluster runs presenced split into planes on one machine, all on
// loopback from local binaries: a three-master Redis Cluster, a PostgreSQL
// primary with a streaming replica (pg_basebackup), and one presenced
// process per plane plus a second presence gateway and a second worker.
// scripts/cluster-up runs it for people; the split-cluster drills run it
// in tests. Each process gets only the stores of its roles, as the Helm
// chart gives them: admit no database, browse only the replica's read-only
// login.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/app"
	"github.com/presenced/presenced/store"
)

// Plane is one presenced process of the split.
type Plane struct {
	Name  string
	Roles []string
}

// Planes are the processes Up starts, in start order: the workers first
// (they tick and relay), the socket planes last.
var Planes = []Plane{
	{"worker", []string{"worker"}},
	{"worker-2", []string{"worker"}},
	{"booking", []string{"booking"}},
	{"browse", []string{"browse"}},
	{"admit", []string{"admit"}},
	{"presence", []string{"presence"}},
	{"presence-2", []string{"presence"}},
	{"ingest", []string{"ingest"}},
	{"count", []string{"count"}},
}

// Options configure Up.
type Options struct {
	// Bin is the presenced binary every plane runs.
	Bin string
	// Dir holds the stores' data, the shared development keys and one log
	// file per process (<name>.log).
	Dir string
	// Env is added to every plane's environment (PRESENCED_*=...).
	Env []string
	Log *slog.Logger
}

// Cluster is a running split.
type Cluster struct {
	opt        Options
	RedisAddrs []string
	redis      *store.RedisCluster
	Primary    *store.EmbeddedPostgres
	Replica    *store.EmbeddedPostgres

	mu    sync.Mutex
	procs map[string]*Proc
}

// Proc is one running presenced process.
type Proc struct {
	Plane
	// URL is its HTTP base, http://127.0.0.1:port.
	URL    string
	cmd    *exec.Cmd
	exited chan struct{}
	log    *os.File
}

// Up starts everything and returns when every plane answers /readyz, or
// stops what it started and returns the error.
func Up(ctx context.Context, opt Options) (c *Cluster, err error) {
	if opt.Log == nil {
		opt.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	dir, err := filepath.Abs(opt.Dir)
	if err != nil {
		return nil, err
	}
	opt.Dir = dir
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return nil, err
	}
	c = &Cluster{opt: opt, procs: map[string]*Proc{}}
	defer func() {
		if err != nil {
			_ = c.Down()
			c = nil
		}
	}()
	if err := c.startRedis(ctx); err != nil {
		return c, err
	}
	c.Primary, err = store.StartEmbeddedPostgres(ctx, filepath.Join(dir, "postgres"), "", opt.Log)
	if err != nil {
		return c, fmt.Errorf("postgres primary: %w", err)
	}
	c.Replica, err = c.Primary.StartReplica(ctx, filepath.Join(dir, "postgres-replica"))
	if err != nil {
		return c, fmt.Errorf("postgres replica: %w", err)
	}
	// Migrations first, on the primary, as the chart's Job does; the
	// planes run with migrate_on_start off.
	mig := exec.CommandContext(ctx, opt.Bin, "migrate")
	mig.Env = append(c.baseEnv(), "PRESENCED_POSTGRES_URL="+c.Primary.URL(store.DevOwner))
	if out, err := mig.CombinedOutput(); err != nil {
		return c, fmt.Errorf("presenced migrate: %v: %s", err, out)
	}
	for _, p := range Planes {
		if err := c.Start(ctx, p.Name); err != nil {
			return c, err
		}
	}
	return c, nil
}

// startRedis starts three masters joined into one cluster.
func (c *Cluster) startRedis(ctx context.Context) error {
	rc, err := store.StartRedisCluster(ctx, filepath.Join(c.opt.Dir, "redis"), 3, 60*time.Second)
	if err != nil {
		return err
	}
	c.redis, c.RedisAddrs = rc, rc.Addrs
	return nil
}

// RedisURL is the cluster's seed URL (redis://a?addr=b&addr=c).
func (c *Cluster) RedisURL() string { return store.RedisClusterURL(c.RedisAddrs) }

// baseEnv is what every process shares: the Redis Cluster, and the
// development keys in one folder (JWT secret, API key, pass, cookie,
// ticket and manifest keys), written once and read by every process.
func (c *Cluster) baseEnv() []string {
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PRESENCED_") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"PRESENCED_REDIS_URL="+c.RedisURL(),
		"PRESENCED_REDIS_CLUSTER=true",
		"PRESENCED_DATA_DIR="+filepath.Join(c.opt.Dir, "data"),
		"PRESENCED_POSTGRES_MIGRATE_ON_START=false",
		"PRESENCED_LOG_FORMAT=json",
		"PRESENCED_HTTP_SHUTDOWN_TIMEOUT=5s",
	)
	return append(env, c.opt.Env...)
}

// envFor gives a plane the database logins its roles need by the role
// table (presenced roles --json): none for admit, the replica's read-only
// login alone for browse, the primary for the others.
func (c *Cluster) envFor(p Plane) []string {
	env := c.baseEnv()
	var stores []string
	for _, r := range app.Roles() {
		if slices.Contains(p.Roles, r.Name) {
			stores = append(stores, r.Stores...)
		}
	}
	writes := slices.Contains(stores, "postgres")
	if writes {
		env = append(env, "PRESENCED_POSTGRES_URL="+c.Primary.URL(store.DevOwner))
	}
	if slices.Contains(stores, "postgres-readonly") {
		ro := c.Replica.URL(store.DevReadOnlyLogin)
		env = append(env, "PRESENCED_POSTGRES_READONLY_URL="+ro)
		if !writes {
			env = append(env, "PRESENCED_POSTGRES_URL="+ro)
		}
	}
	return env
}

func planeNamed(name string) (Plane, bool) {
	for _, p := range Planes {
		if p.Name == name {
			return p, true
		}
	}
	return Plane{}, false
}

// Start starts (or restarts) one plane on a free loopback port and waits
// until its /readyz answers 200.
func (c *Cluster) Start(ctx context.Context, name string) error {
	p, ok := planeNamed(name)
	if !ok {
		return fmt.Errorf("no plane %q", name)
	}
	port, err := store.FreePort()
	if err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logf, err := os.OpenFile(filepath.Join(c.opt.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.opt.Bin, "serve", "--listen", addr, "--roles", strings.Join(p.Roles, ","))
	cmd.Env = c.envFor(p)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, killed with its parent if the parent dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	proc := &Proc{Plane: p, URL: "http://" + addr, cmd: cmd, exited: make(chan struct{}), log: logf}
	go func() { _ = cmd.Wait(); logf.Close(); close(proc.exited) }()
	c.mu.Lock()
	c.procs[name] = proc
	c.mu.Unlock()
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get(proc.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				c.opt.Log.Info("plane ready", "plane", name, "url", proc.URL, "pid", cmd.Process.Pid)
				return nil
			}
		}
		select {
		case <-proc.exited:
			return fmt.Errorf("%s exited while starting: see %s", name, filepath.Join(c.opt.Dir, name+".log"))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within 90s: see %s", name, filepath.Join(c.opt.Dir, name+".log"))
		}
	}
}

// Proc is the running process of a plane, nil if it is not running.
func (c *Cluster) Proc(name string) *Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs[name]
}

// URL is a plane's HTTP base.
func (c *Cluster) URL(name string) string {
	if p := c.Proc(name); p != nil {
		return p.URL
	}
	return ""
}

// Kill SIGKILLs a plane (a crash: no drain, no lease release).
func (c *Cluster) Kill(name string) error { return c.signal(name, syscall.SIGKILL) }

// Stop SIGTERMs a plane (a graceful stop) and waits for it.
func (c *Cluster) Stop(name string) error { return c.signal(name, syscall.SIGTERM) }

func (c *Cluster) signal(name string, sig syscall.Signal) error {
	c.mu.Lock()
	p := c.procs[name]
	delete(c.procs, name)
	c.mu.Unlock()
	if p == nil {
		return fmt.Errorf("plane %q is not running", name)
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
		return nil
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("%s did not stop on %v within 30s", name, sig)
	}
}

// Pids lists the running processes (planes and stores) for cluster-down.
func (c *Cluster) Pids() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for n, p := range c.procs {
		out[n] = p.cmd.Process.Pid
	}
	return out
}

// Down stops every plane, then the stores.
func (c *Cluster) Down() error {
	var errs []error
	c.mu.Lock()
	names := make([]string, 0, len(c.procs))
	for n := range c.procs {
		names = append(names, n)
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	var emu sync.Mutex
	for _, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Stop(n); err != nil {
				emu.Lock()
				errs = append(errs, err)
				emu.Unlock()
			}
		}()
	}
	wg.Wait()
	if c.Replica != nil {
		errs = append(errs, c.Replica.Stop())
	}
	if c.Primary != nil {
		errs = append(errs, c.Primary.Stop())
	}
	if c.redis != nil {
		c.redis.Stop()
	}
	return errors.Join(errs...)
}

// KillRedis stops Redis Cluster master i (0-2): its slots go down, and
// after cluster-node-timeout the cluster refuses every command.
func (c *Cluster) KillRedis(i int) error {
	return c.redis.Servers[i].Stop()
}

// RestartRedis starts master i again on its port and folder: it rejoins
// with the same identity and slots (from nodes.conf), its data gone (the
// nodes keep nothing on disk).
func (c *Cluster) RestartRedis(ctx context.Context, i int) error {
	return c.redis.RestartNode(ctx, i)
}

// RedisHealthy is nil when every node reports the cluster whole.
func (c *Cluster) RedisHealthy(ctx context.Context) error {
	for _, a := range c.RedisAddrs {
		n := redis.NewClient(&redis.Options{Addr: a})
		info, err := n.ClusterInfo(ctx).Result()
		n.Close()
		if err != nil {
			return fmt.Errorf("redis %s: %w", a, err)
		}
		if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:3") {
			return fmt.Errorf("redis %s: cluster not ok", a)
		}
	}
	return nil
}
