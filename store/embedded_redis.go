package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
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
// persistence and waits until it answers PING. When it picks the port
// itself it retries with another one if the server cannot bind it (another
// process took it first). Start errors end with the server's own last log
// lines, which say why it stopped.
func StartRedisServer(ctx context.Context, opt RedisServerOptions) (*EmbeddedRedis, error) {
	return startRedisServer(ctx, opt, FreePort)
}

// redisStartAttempts bounds the retries on ports taken under our feet.
const redisStartAttempts = 5

// errPortTaken marks a start that failed because the port was in use.
var errPortTaken = errors.New("port in use")

func startRedisServer(ctx context.Context, opt RedisServerOptions, pickPort func() (int, error)) (*EmbeddedRedis, error) {
	bin := opt.Binary
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("redis-server"); err != nil {
			return nil, errors.New("redis-server not found on PATH: install it (apt-get install redis-server, brew install redis) or set redis.url")
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
	for attempt := 1; ; attempt++ {
		port := opt.Port
		if port == 0 {
			var err error
			if port, err = pickPort(); err != nil {
				return nil, err
			}
		}
		srv, err := runRedisServer(ctx, bin, port, dir, opt.Args, cleanupDir)
		if err == nil {
			return srv, nil
		}
		if opt.Port != 0 || attempt == redisStartAttempts || !errors.Is(err, errPortTaken) {
			if cleanupDir {
				_ = os.RemoveAll(dir)
			}
			return nil, err
		}
	}
}

func runRedisServer(ctx context.Context, bin string, port int, dir string, extra []string, cleanupDir bool) (*EmbeddedRedis, error) {
	args := []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
	}
	args = append(args, extra...)
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = childProcAttr()
	// Without a logfile redis-server logs to stdout, and the reason it
	// refused to start ("port number too high", "Address already in use")
	// is only there.
	serverLog := newLogTail(20)
	cmd.Stdout, cmd.Stderr = serverLog, serverLog
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("redis-server: start: %w", err)
	}
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
			logged := serverLog.String()
			err := fmt.Errorf("redis-server on port %d exited (%v); its log: %s", port, werr, logged)
			if strings.Contains(logged, "Address already in use") {
				err = fmt.Errorf("%w: %w", errPortTaken, err)
			}
			return nil, err
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			// Stop it without removing dir: the caller owns it and may retry.
			_ = cmd.Process.Kill()
			<-exited
			return nil, fmt.Errorf("redis-server on port %d does not answer: %w; its log: %s", port, err, serverLog.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logTail is an io.Writer that keeps the last lines a child process wrote.
type logTail struct {
	mu    sync.Mutex
	max   int
	lines []string
	part  []byte
}

func newLogTail(maxLines int) *logTail { return &logTail{max: maxLines} }

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.part = append(l.part, p...)
	for {
		i := bytes.IndexByte(l.part, '\n')
		if i < 0 {
			break
		}
		l.add(string(l.part[:i]))
		l.part = l.part[i+1:]
	}
	if len(l.part) > 4096 { // a line without end: keep its start
		l.add(string(l.part[:4096]))
		l.part = l.part[:0]
	}
	return len(p), nil
}

func (l *logTail) add(line string) {
	if line = strings.TrimSpace(line); line == "" {
		return
	}
	l.lines = append(l.lines, line)
	if len(l.lines) > l.max {
		l.lines = l.lines[len(l.lines)-l.max:]
	}
}

// String joins the kept lines, or says there were none.
func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := l.lines
	if len(l.part) > 0 {
		lines = append(lines[:len(lines):len(lines)], string(l.part))
	}
	if len(lines) == 0 {
		return "(nothing)"
	}
	return strings.Join(lines, " | ")
}
