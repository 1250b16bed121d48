package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// EmbeddedRedis is a development Redis owned by this process: a private
// redis-server child when one is installed, otherwise an in-process server.
type EmbeddedRedis struct {
	URL  string
	Kind string // "redis-server" or "in-process"
	stop func() error
	once sync.Once
	err  error
}

// Stop ends the server; it is safe to call more than once.
func (e *EmbeddedRedis) Stop() error {
	e.once.Do(func() { e.err = e.stop() })
	return e.err
}

// StartEmbeddedRedis starts the development Redis on a free loopback port.
func StartEmbeddedRedis(ctx context.Context, log *slog.Logger) (*EmbeddedRedis, error) {
	if bin, err := exec.LookPath("redis-server"); err == nil {
		srv, err := StartRedisServer(ctx, RedisServerOptions{Binary: bin})
		if err == nil {
			return srv, nil
		}
		log.Warn("private redis-server did not start; using the in-process server", "err", err)
	}
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("embedded redis: %w", err)
	}
	return &EmbeddedRedis{
		URL:  "redis://" + m.Addr(),
		Kind: "in-process",
		stop: func() error { m.Close(); return nil },
	}, nil
}

// RedisServerOptions configures a private redis-server child.
type RedisServerOptions struct {
	Binary string   // empty: redis-server from PATH
	Port   int      // 0: a free port
	Dir    string   // working directory (cluster config files); empty: a temp dir
	Args   []string // extra server arguments, e.g. "--cluster-enabled", "yes"
}

// StartRedisServer runs redis-server as a child bound to 127.0.0.1 without
// persistence and waits until it answers PING.
func StartRedisServer(ctx context.Context, opt RedisServerOptions) (*EmbeddedRedis, error) {
	bin := opt.Binary
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("redis-server"); err != nil {
			return nil, errors.New("redis-server not found on PATH: install it (apt-get install redis-server, brew install redis) or set redis.url")
		}
	}
	port := opt.Port
	if port == 0 {
		var err error
		if port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	dir := opt.Dir
	cleanupDir := false
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "presenced-redis-"); err != nil {
			return nil, fmt.Errorf("redis-server: %w", err)
		}
		cleanupDir = true
	}
	args := []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
	}
	args = append(args, opt.Args...)
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = childProcAttr()
	stderr, _ := cmd.StderrPipe()
	cmd.Stdout = nil
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("redis-server: start: %w", err)
	}
	var errLines strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if errLines.Len() < 2000 {
				errLines.WriteString(sc.Text() + "\n")
			}
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() error {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if cleanupDir {
			_ = os.RemoveAll(dir)
		}
		return nil
	}
	url := fmt.Sprintf("redis://127.0.0.1:%d", port)
	client := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), MaxRetries: -1})
	defer client.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := client.Ping(ctx).Err()
		if err == nil {
			return &EmbeddedRedis{URL: url, Kind: "redis-server", stop: stop}, nil
		}
		select {
		case werr := <-exited:
			exited <- werr
			_ = stop()
			return nil, fmt.Errorf("redis-server exited: %v: %s", werr, strings.TrimSpace(errLines.String()))
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = stop()
			return nil, fmt.Errorf("redis-server on port %d does not answer: %w", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// FreePort asks the kernel for a free loopback TCP port.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
