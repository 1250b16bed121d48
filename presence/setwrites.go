package presence

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// memberWrite adds member to, or removes it from, the set at key.
type memberWrite struct {
	key    string
	member any
	remove bool
}

// setWrites coalesces the member writes of one batch: one SADD or SREM per
// set for the members of every call in the batch, not one per member. In a
// connect burst the users connecting together follow many of the same
// users (a team, a chat room), so their follower-set writes share keys; a
// disconnect storm drops them alike.
//
// Writes to one key keep their order: a key gets a new command whenever
// the kind changes, so an add and a remove of the same member run in the
// order they were asked. Each command is on one key, so each is atomic and
// goes to its own node in a Cluster.
type setWrites struct {
	writes []batchedWrite
	groups []setGroup
	// last is each key's latest group.
	last map[string]int
	// args backs the commands' arguments, all groups in one allocation.
	args []any
}

type batchedWrite struct {
	member any
	group  int
	call   *batchCall
}

type setGroup struct {
	key     string
	remove  bool
	members int
	cmd     *redis.IntCmd
}

var setWritesPool = sync.Pool{New: func() any { return &setWrites{last: make(map[string]int)} }}

// add takes the writes of c.
func (w *setWrites) add(c *batchCall) {
	for _, m := range c.writes {
		i, ok := w.last[m.key]
		if !ok || w.groups[i].remove != m.remove {
			i = len(w.groups)
			w.groups = append(w.groups, setGroup{key: m.key, remove: m.remove})
			w.last[m.key] = i
		}
		w.groups[i].members++
		w.writes = append(w.writes, batchedWrite{member: m.member, group: i, call: c})
	}
}

// queue adds the coalesced commands to p.
func (w *setWrites) queue(ctx context.Context, p redis.Pipeliner) {
	if len(w.groups) == 0 {
		return
	}
	w.args = w.args[:0]
	w.args = append(w.args, make([]any, len(w.writes)+2*len(w.groups))...)
	// Each group's arguments: the command, the key, then its members in
	// the order asked.
	args := make([][]any, len(w.groups))
	off := 0
	for i, g := range w.groups {
		name := "sadd"
		if g.remove {
			name = "srem"
		}
		args[i] = append(w.args[off:off:off+2+g.members], name, g.key)
		off += 2 + g.members
	}
	for _, m := range w.writes {
		args[m.group] = append(args[m.group], m.member)
	}
	for i := range w.groups {
		w.groups[i].cmd = redis.NewIntCmd(ctx, args[i]...)
		_ = p.Process(ctx, w.groups[i].cmd)
	}
}

// answer gives each call the first error of a command holding its writes.
func (w *setWrites) answer() {
	for _, m := range w.writes {
		if err := w.groups[m.group].cmd.Err(); err != nil && m.call.writesErr == nil {
			m.call.writesErr = err
		}
	}
}

// release returns w to the pool, holding no member, key or call.
func (w *setWrites) release() {
	clear(w.writes)
	clear(w.groups)
	clear(w.args)
	clear(w.last)
	w.writes, w.groups, w.args = w.writes[:0], w.groups[:0], w.args[:0]
	setWritesPool.Put(w)
}

// writeMembers runs writes as one call of the batcher, coalesced with the
// member writes of the calls sent with it.
func (b *batcher) writeMembers(ctx context.Context, writes []memberWrite) error {
	if len(writes) == 0 {
		return nil
	}
	c := &batchCall{writes: writes}
	if err := b.do(ctx, c); err != nil {
		return err
	}
	return c.writesErr
}
