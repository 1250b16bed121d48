package waitingroom

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/admission"
	"github.com/presenced/presenced/store"
)

var (
	//go:embed lua/entry.lua
	entryLua string
	//go:embed lua/join.lua
	joinLua string
	//go:embed lua/positions.lua
	positionsLua string
	//go:embed lua/tick.lua
	tickLua string
	//go:embed lua/draw.lua
	drawLua string
	//go:embed lua/sweep.lua
	sweepLua string
	//go:embed lua/stats.lua
	statsLua string

	// Every script that reads or writes the line starts with entry.lua,
	// the one definition of an entry's score.
	joinScript      = store.NewScript("waitingroom_join", entryLua+joinLua)
	positionsScript = store.NewScript("waitingroom_positions", entryLua+positionsLua)
	tickScript      = store.NewScript("waitingroom_tick", entryLua+tickLua)
	drawScript      = store.NewScript("waitingroom_draw", entryLua+drawLua)
	sweepScript     = store.NewScript("waitingroom_sweep", entryLua+sweepLua)
	statsScript     = store.NewScript("waitingroom_stats", entryLua+statsLua)
)

// eventKeys are the Redis keys of one event's waiting room. They share the
// event's hash tag, so every script runs on one Cluster slot.
type eventKeys struct {
	line     string // sorted set: user -> place and heartbeat (lua/entry.lua)
	leases   string // sorted set: user -> lease expiry, ms
	sequence string // counter of join order
	settings string // hash: the operator's settings
	state    string // hash: bookkeeping of the ticks and the draw
	ticks    string // sorted set: per-tick admissions and abandonments
	joins    string // sorted set: sequence -> when it was reached, ms
	topic    string // channel: users admitted by a tick
	// The layout before the line (two sorted sets per event), emptied into
	// the line during a rolling upgrade: see lua/entry.lua.
	oldQueue string // user -> sequence (drawn lottery entries: a key < 0)
	oldBeats string // user -> last heartbeat, ms
}

func keysOf(ks store.Keyspace, event string) eventKeys {
	// The leases are internal/admission's, in their slot with the rest.
	e := admission.Slot(ks, event)
	return eventKeys{
		line: e.Key("line"), leases: admission.LeaseKey(ks, event), sequence: e.Key("seq"),
		settings: e.Key("cfg"), state: e.Key("st"), ticks: e.Key("tl"), joins: e.Key("jt"),
		topic: e.Key("admitted"), oldQueue: e.Key("q"), oldBeats: e.Key("hb"),
	}
}

func (k eventKeys) all() []string {
	return []string{k.line, k.leases, k.sequence, k.settings, k.state, k.ticks, k.joins, k.oldQueue, k.oldBeats}
}

// lineStore keeps the waiting rooms of every event in Redis.
type lineStore struct {
	rdb  redis.UniversalClient
	keys store.Keyspace
	// registry holds the set of events the workers tick and its version.
	registry store.EntityKeys
}

// newLineStore returns the waiting rooms kept in rdb under keys.
func newLineStore(rdb redis.UniversalClient, keys store.Keyspace) *lineStore {
	return &lineStore{rdb: rdb, keys: keys, registry: keys.Global("waitingroom")}
}

// roomState is what a join or position answer needs to know about the event.
type roomState struct {
	Now      time.Time // Redis's clock
	Capacity int
	Batch    int
	Lease    time.Duration
	OpenAt   time.Time // zero: open
	Mode     string
	Paused   bool
	Rate     float64 // measured admissions per second
	Active   int     // live leases: capacity minus Active places are free
	Drawn    bool
	// CohortMax is the last sequence number taken before the open time: the
	// entries up to it are the cohort a lottery draws.
	CohortMax int64
}

// placeInLine is one user's standing in a waiting room.
type placeInLine struct {
	State string // StateQueued, StateAdmitted or StateAbsent
	// Rank is the number of entries ahead (queued only).
	Rank int64
	// Undrawn: queued in a lottery cohort before the draw; no rank yet.
	Undrawn bool
	// LeaseExpiry of an admitted user.
	LeaseExpiry time.Time
}

// Join puts user in line (or keeps their place) and answers their place.
func (l *lineStore) Join(ctx context.Context, event, user string) (roomState, placeInLine, error) {
	return l.place(ctx, event, user, "join")
}

// Status answers user's place and refreshes their heartbeat, without
// joining.
func (l *lineStore) Status(ctx context.Context, event, user string) (roomState, placeInLine, error) {
	return l.place(ctx, event, user, "status")
}

func (l *lineStore) place(ctx context.Context, event, user, mode string) (roomState, placeInLine, error) {
	k := keysOf(l.keys, event)
	res, err := joinScript.Run(ctx, l.rdb, []string{k.line, k.leases, k.sequence, k.settings, k.state, k.oldQueue, k.oldBeats}, user, mode).Slice()
	if err != nil {
		return roomState{}, placeInLine{}, fmt.Errorf("waitingroom %s: %w", mode, err)
	}
	if len(res) == 0 || str(res[0]) == "none" {
		return roomState{}, placeInLine{}, errNoRoom
	}
	if len(res) < 3+roomFields {
		return roomState{}, placeInLine{}, fmt.Errorf("waitingroom %s: short reply", mode)
	}
	room, err := roomFrom(res[3 : 3+roomFields])
	if err != nil {
		return roomState{}, placeInLine{}, err
	}
	return room, placeFrom(room, str(res[0]), res[1], str(res[2])), nil
}

func placeFrom(room roomState, kind string, value any, place string) placeInLine {
	switch kind {
	case StateAdmitted:
		return placeInLine{State: StateAdmitted, LeaseExpiry: time.UnixMilli(int64(num(value)))}
	case StateQueued:
		p, _ := strconv.ParseInt(place, 10, 64)
		undrawn := room.Mode == ModeLottery && !room.Drawn && !room.OpenAt.IsZero() && p > 0 && p <= room.CohortMax
		return placeInLine{State: StateQueued, Rank: int64(num(value)), Undrawn: undrawn}
	}
	return placeInLine{State: StateAbsent}
}

// roomFields is the length of the room header of join and positions
// replies: {now, capacity, batch, lease, open, mode, paused, rate, drawn,
// cohort, active}.
const roomFields = 11

func roomFrom(v []any) (roomState, error) {
	if len(v) < roomFields {
		return roomState{}, errors.New("waitingroom: short reply")
	}
	r := roomState{
		Now:       time.UnixMilli(int64(num(v[0]))),
		Capacity:  int(num(v[1])),
		Batch:     int(num(v[2])),
		Lease:     time.Duration(num(v[3])) * time.Second,
		Mode:      str(v[5]),
		Paused:    str(v[6]) == "1",
		Rate:      num(v[7]),
		Drawn:     str(v[8]) == "1",
		CohortMax: int64(num(v[9])),
		Active:    int(num(v[10])),
	}
	if open := int64(num(v[4])); open > 0 {
		r.OpenAt = time.UnixMilli(open)
	}
	return r, nil
}

// Places answers the places of many users at once and refreshes the
// heartbeats of those queued. It returns ErrNoRoom when the room is gone.
func (l *lineStore) Places(ctx context.Context, event string, users []string) (roomState, []placeInLine, error) {
	k := keysOf(l.keys, event)
	args := make([]any, len(users))
	for i, u := range users {
		args[i] = u
	}
	res, err := positionsScript.Run(ctx, l.rdb, []string{k.line, k.leases, k.settings, k.state, k.oldQueue, k.oldBeats}, args...).Slice()
	if err != nil {
		return roomState{}, nil, fmt.Errorf("waitingroom positions: %w", err)
	}
	if len(res) == 0 {
		return roomState{}, nil, errNoRoom
	}
	if len(res) != roomFields+3*len(users) {
		return roomState{}, nil, errors.New("waitingroom positions: reply does not match the users")
	}
	room, err := roomFrom(res[:roomFields])
	if err != nil {
		return roomState{}, nil, err
	}
	places := make([]placeInLine, len(users))
	for i := range users {
		at := roomFields + 3*i
		kind, value, place := res[at], res[at+1], str(res[at+2])
		switch num(kind) {
		case 1:
			places[i] = placeFrom(room, StateQueued, value, place)
		case 2:
			places[i] = placeFrom(room, StateAdmitted, value, place)
		default:
			places[i] = placeInLine{State: StateAbsent}
		}
	}
	return room, places, nil
}

// Leave takes user out of line and gives up their lease, if any.
func (l *lineStore) Leave(ctx context.Context, event, user string) error {
	k := keysOf(l.keys, event)
	_, err := l.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRem(ctx, k.line, user)
		p.ZRem(ctx, k.oldQueue, user)
		p.ZRem(ctx, k.oldBeats, user)
		p.ZRem(ctx, k.leases, user)
		return nil
	})
	if err != nil {
		return fmt.Errorf("waitingroom leave: %w", err)
	}
	return nil
}

// tickOptions are the worker's side of a tick.
type tickOptions struct {
	MinGap       time.Duration // ticks of one event closer than this are skipped
	CleanupLimit int           // abandoned entries removed per tick at most
	SweepLimit   int           // entries whose heartbeat one tick's sweep reads at most
	Period       time.Duration // one sweep and tick per period
	// Swept is how many entries the sweep removed just before the tick, for
	// the tick's log.
	Swept     int
	OutageGap time.Duration // a gap this long credits heartbeats
	Window    time.Duration // span of the admission-rate estimate
}

// tickResult is what one tick did.
type tickResult struct {
	Status    string // ok, skip, gone, paused, closed, draw
	Now       time.Time
	Capacity  int
	Active    int
	Queued    int
	Abandoned int
	Admitted  []string
	// Waits are the admitted users' join-to-admit times, to one tick.
	Waits []time.Duration
}

// Tick runs one admission tick of event.
func (l *lineStore) Tick(ctx context.Context, event string, o tickOptions) (tickResult, error) {
	k := keysOf(l.keys, event)
	res, err := tickScript.Run(ctx, l.rdb,
		[]string{k.line, k.leases, k.sequence, k.settings, k.state, k.ticks, k.joins, k.oldQueue, k.oldBeats},
		o.MinGap.Milliseconds(), o.CleanupLimit, o.OutageGap.Milliseconds(), o.Window.Milliseconds(), o.Swept, o.SweepLimit).Slice()
	if err != nil {
		return tickResult{}, fmt.Errorf("waitingroom tick %s: %w", event, err)
	}
	if len(res) < 2 {
		return tickResult{}, fmt.Errorf("waitingroom tick %s: short reply", event)
	}
	r := tickResult{Status: str(res[0]), Now: time.UnixMilli(int64(num(res[1])))}
	if len(res) < 8 {
		return r, nil
	}
	r.Capacity, r.Active, r.Queued, r.Abandoned = int(num(res[2])), int(num(res[3])), int(num(res[4])), int(num(res[5]))
	users, _ := res[6].([]any)
	waits, _ := res[7].([]any)
	for i, u := range users {
		r.Admitted = append(r.Admitted, str(u))
		if i < len(waits) {
			r.Waits = append(r.Waits, time.Duration(num(waits[i]))*time.Millisecond)
		}
	}
	return r, nil
}

// sweepSlice is the entries one sweep call reads: about a millisecond of
// Redis time, so the sweep never stalls the joins around it.
const sweepSlice = 1000

// Sweep removes abandoned entries from event's line, from where the last
// sweep stopped, and answers how many it removed (at most o.CleanupLimit).
// It reads in slices of sweepSlice, each its own call, enough for every
// entry to be looked at twice per heartbeat timeout at one sweep per
// o.Period, but at least one slice and at most o.SweepLimit entries.
func (l *lineStore) Sweep(ctx context.Context, event string, o tickOptions) (int, error) {
	k := keysOf(l.keys, event)
	read, removed, target := 0, 0, min(sweepSlice, o.SweepLimit)
	for read < target && removed < o.CleanupLimit {
		res, err := sweepScript.Run(ctx, l.rdb, []string{k.line, k.settings, k.state},
			min(sweepSlice, target-read), o.CleanupLimit-removed, o.OutageGap.Milliseconds()).Slice()
		if err != nil {
			return removed, fmt.Errorf("waitingroom sweep %s: %w", event, err)
		}
		if len(res) != 5 {
			return removed, fmt.Errorf("waitingroom sweep %s: short reply", event)
		}
		read += int(num(res[0]))
		removed += int(num(res[1]))
		if num(res[2]) == 1 {
			break // reached the end of the line: the next sweep starts over
		}
		if timeout := time.Duration(num(res[4])) * time.Second; timeout > 0 && o.Period > 0 {
			due := int(math.Ceil(num(res[3]) * o.Period.Seconds() / (timeout / 2).Seconds()))
			target = max(target, min(due, o.SweepLimit))
		}
	}
	return removed, nil
}

// Draw runs one step of the lottery draw with the given random keys. It
// reports how many entries were drawn and whether the draw is complete.
func (l *lineStore) Draw(ctx context.Context, event string, keys []int64) (int, bool, error) {
	k := keysOf(l.keys, event)
	args := make([]any, len(keys))
	for i, v := range keys {
		args[i] = v
	}
	res, err := drawScript.Run(ctx, l.rdb, []string{k.line, k.settings, k.state, k.oldQueue}, args...).Slice()
	if err != nil {
		return 0, false, fmt.Errorf("waitingroom draw %s: %w", event, err)
	}
	if len(res) != 2 {
		return 0, false, fmt.Errorf("waitingroom draw %s: short reply", event)
	}
	return int(num(res[0])), num(res[1]) == 1, nil
}

// shardOf spreads events over the tick leases.
func shardOf(event string, shards int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(event))
	return int(h.Sum32() % uint32(shards))
}

func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

func num(v any) float64 {
	switch x := v.(type) {
	case int64:
		return float64(x)
	case string:
		f, _ := strconv.ParseFloat(x, 64)
		return f
	case float64:
		return x
	}
	return 0
}
