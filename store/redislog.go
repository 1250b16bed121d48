package store

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisLogger carries go-redis's own log lines (failed dials, pool
// trouble) into slog. An unreachable Redis makes go-redis log a few lines
// every second or two, forever: after a burst, one line per interval gets
// through, saying how many were held back since the last one.
type redisLogger struct {
	log      *slog.Logger
	burst    int
	interval time.Duration
	now      func() time.Time

	mu         sync.Mutex
	windowFrom time.Time
	inWindow   int
	held       int
}

func newRedisLogger(log *slog.Logger, burst int, interval time.Duration) *redisLogger {
	return &redisLogger{log: log, burst: burst, interval: interval, now: time.Now}
}

// Printf implements go-redis's logging interface.
func (l *redisLogger) Printf(ctx context.Context, format string, v ...any) {
	now := l.now()
	l.mu.Lock()
	if now.Sub(l.windowFrom) >= l.interval {
		l.windowFrom, l.inWindow = now, 0
	}
	if l.inWindow >= l.burst {
		l.held++
		l.mu.Unlock()
		return
	}
	l.inWindow++
	held := l.held
	l.held = 0
	l.mu.Unlock()
	attrs := []any{"detail", strings.TrimSpace(fmt.Sprintf(format, v...))}
	if held > 0 {
		attrs = append(attrs, "held_back", held)
	}
	l.log.WarnContext(ctx, "redis client", attrs...)
}

// RouteRedisLog sends go-redis's log lines to log, at most three at once
// and then one every ten seconds. go-redis has a single logger per
// process: call this once from the process's entry point, before any
// client exists.
func RouteRedisLog(log *slog.Logger) {
	redis.SetLogger(newRedisLogger(log, 3, 10*time.Second))
}
