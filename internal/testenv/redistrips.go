package testenv

import (
	"context"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// RedisTrips is a go-redis hook that counts what a client sends: one round
// trip per command outside a pipeline, one per pipeline, with the names of
// the commands. The commands a new pool connection sends first (HELLO,
// CLIENT, AUTH, SELECT) are not the code under test and are not counted.
// Add it with AddHook; it counts from Start. Hooks that do more (hold a
// call, act before a pipeline) embed it and call Note. Once Mark was
// called it counts only what is sent with a context Mark returned, so the
// background loops sharing the client are not counted.
type RedisTrips struct {
	mu     sync.Mutex
	on     bool
	marked bool
	trips  int
	names  []string
}

type tripsMark struct{}

// Mark returns ctx marked as the code under test's: from now on only the
// commands sent with a marked context are counted.
func (r *RedisTrips) Mark(ctx context.Context) context.Context {
	r.mu.Lock()
	r.marked = true
	r.mu.Unlock()
	return context.WithValue(ctx, tripsMark{}, r)
}

// Counts reports whether what is sent with ctx is counted: any context
// until Mark is called, then only the marked ones.
func (r *RedisTrips) Counts(ctx context.Context) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts(ctx)
}

func (r *RedisTrips) counts(ctx context.Context) bool {
	return !r.marked || ctx.Value(tripsMark{}) == r
}

func (r *RedisTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *RedisTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.Note(ctx, cmd)
		return next(ctx, cmd)
	}
}

func (r *RedisTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.Note(ctx, cmds...)
		return next(ctx, cmds)
	}
}

// Note counts one round trip carrying cmds, sent with ctx.
func (r *RedisTrips) Note(ctx context.Context, cmds ...redis.Cmder) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.on || connectionSetup(cmds) || !r.counts(ctx) {
		return
	}
	r.trips++
	for _, c := range cmds {
		r.names = append(r.names, strings.ToLower(c.Name()))
	}
}

// Start counts from zero.
func (r *RedisTrips) Start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on, r.trips, r.names = true, 0, nil
}

// Count returns the round trips since Start and the commands they carried,
// lower case, in order.
func (r *RedisTrips) Count() (trips int, names []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.trips, append([]string(nil), r.names...)
}

// connectionSetup tells the commands a new pool connection sends first.
func connectionSetup(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		switch strings.ToLower(c.Name()) {
		case "hello", "client", "auth", "select":
		default:
			return false
		}
	}
	return true
}
