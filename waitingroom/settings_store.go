package waitingroom

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The operator's side of the line: settings, the registry of events the
// workers tick, deletion and live statistics.

// Settings reads event's settings; ErrNoRoom when it has none.
func (l *lineStore) Settings(ctx context.Context, event string) (Settings, error) {
	h, err := l.rdb.HGetAll(ctx, keysOf(l.keys, event).settings).Result()
	if err != nil {
		return Settings{}, fmt.Errorf("waitingroom settings: %w", err)
	}
	if len(h) == 0 {
		return Settings{}, errNoRoom
	}
	return settingsFromHash(h)
}

// PutSettings stores event's settings and registers the event with the
// workers.
func (l *lineStore) PutSettings(ctx context.Context, event string, s Settings) error {
	if err := l.rdb.HSet(ctx, keysOf(l.keys, event).settings, s.hash()).Err(); err != nil {
		return fmt.Errorf("waitingroom put settings: %w", err)
	}
	return l.register(ctx, event)
}

// UpdateSettings applies change to event's settings (to defaults when the
// room does not exist yet) under optimistic locking, so two operators
// changing different fields at once both keep their change. It answers the
// stored settings and whether the room was created.
func (l *lineStore) UpdateSettings(ctx context.Context, event string, defaults Settings, change func(Settings) (Settings, error)) (Settings, bool, error) {
	key := keysOf(l.keys, event).settings
	var next Settings
	var created bool
	update := func(tx *redis.Tx) error {
		h, err := tx.HGetAll(ctx, key).Result()
		if err != nil {
			return err
		}
		current := defaults
		created = len(h) == 0
		if !created {
			if current, err = settingsFromHash(h); err != nil {
				return err
			}
		}
		if next, err = change(current); err != nil {
			return &invalidSettingsError{Err: err}
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, key, next.hash())
			return nil
		})
		return err
	}
	for attempt := 0; ; attempt++ {
		err := l.rdb.Watch(ctx, update, key)
		if errors.Is(err, redis.TxFailedErr) && attempt < 50 {
			// Another change won the race: back off a little and retry.
			time.Sleep(time.Duration(1+rand.IntN(5)) * time.Millisecond)
			continue
		}
		var invalid *invalidSettingsError
		if errors.As(err, &invalid) {
			return Settings{}, false, err
		}
		if err != nil {
			return Settings{}, false, fmt.Errorf("waitingroom update settings: %w", err)
		}
		break
	}
	return next, created, l.register(ctx, event)
}

// register adds event to the set the workers tick. The registry lives in
// another slot: it is written after the settings, so a worker never ticks
// an event without them, and on every change, so a failure here is
// repaired by the operator's retry.
func (l *lineStore) register(ctx context.Context, event string) error {
	_, err := l.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SAdd(ctx, l.registry.Key("events"), event)
		p.Incr(ctx, l.registry.Key("events", "version"))
		return nil
	})
	if err != nil {
		return fmt.Errorf("waitingroom register event: %w", err)
	}
	return nil
}

// Delete removes event's waiting room: its line, its leases (every pass of
// the event stops verifying) and its registration.
func (l *lineStore) Delete(ctx context.Context, event string) error {
	_, err := l.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SRem(ctx, l.registry.Key("events"), event)
		p.Incr(ctx, l.registry.Key("events", "version"))
		return nil
	})
	if err != nil {
		return fmt.Errorf("waitingroom unregister event: %w", err)
	}
	if err := l.rdb.Del(ctx, keysOf(l.keys, event).all()...).Err(); err != nil {
		return fmt.Errorf("waitingroom delete: %w", err)
	}
	return nil
}

// Events lists the registered events and the registry's version.
func (l *lineStore) Events(ctx context.Context) ([]string, int64, error) {
	var members *redis.StringSliceCmd
	var version *redis.StringCmd
	_, err := l.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		members = p.SMembers(ctx, l.registry.Key("events"))
		version = p.Get(ctx, l.registry.Key("events", "version"))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, 0, fmt.Errorf("waitingroom events: %w", err)
	}
	v, _ := strconv.ParseInt(version.Val(), 10, 64)
	return members.Val(), v, nil
}

// EventsVersion is the registry's version, bumped by every change.
func (l *lineStore) EventsVersion(ctx context.Context) (int64, error) {
	v, err := l.rdb.Get(ctx, l.registry.Key("events", "version")).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("waitingroom events version: %w", err)
	}
	return v, nil
}

// Stats reads event's live figures.
func (l *lineStore) Stats(ctx context.Context, event string) (Stats, error) {
	k := keysOf(l.keys, event)
	res, err := statsScript.Run(ctx, l.rdb, []string{k.line, k.leases, k.state, k.ticks, k.joins, k.settings, k.oldQueue}, time.Minute.Milliseconds()).Slice()
	if err != nil {
		return Stats{}, fmt.Errorf("waitingroom stats: %w", err)
	}
	if len(res) == 0 {
		return Stats{}, errNoRoom
	}
	if len(res) < 9 {
		return Stats{}, errors.New("waitingroom stats: short reply")
	}
	s := Stats{
		Queued: int(num(res[1])), Active: int(num(res[2])),
		AdmittedPerMinute: int(num(res[3])), AbandonedPerMinute: int(num(res[4])),
		AdmissionRate: num(res[6]), LotteryDrawn: str(res[7]) == "1",
	}
	if oldest := num(res[5]); oldest >= 0 {
		secs := oldest / 1000
		s.OldestWaitSeconds = &secs
	}
	if lt := int64(num(res[8])); lt > 0 {
		at := time.UnixMilli(lt).UTC()
		s.LastTick = &at
	}
	return s, nil
}

// MemoryUsage is Redis's estimate of the bytes held by event's line, and
// by the old layout's queue and heartbeats while an upgrade empties them
// (sampled for big sets).
func (l *lineStore) MemoryUsage(ctx context.Context, event string) (int64, error) {
	k := keysOf(l.keys, event)
	var total int64
	for _, key := range []string{k.line, k.oldQueue, k.oldBeats} {
		n, err := l.rdb.MemoryUsage(ctx, key).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("waitingroom memory usage: %w", err)
		}
		total += n
	}
	return total, nil
}
