package presence

import (
	"context"

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
	groups []setGroup
	// last is each key's latest group.
	last map[string]int
}

type setGroup struct {
	args  []any // SADD|SREM, key, members...
	calls []*batchCall
	cmd   *redis.IntCmd
}

// add takes the writes of c.
func (w *setWrites) add(c *batchCall) {
	if w.last == nil {
		w.last = make(map[string]int, len(c.writes))
	}
	for _, m := range c.writes {
		i, ok := w.last[m.key]
		if !ok || w.groups[i].removes() != m.remove {
			name := "sadd"
			if m.remove {
				name = "srem"
			}
			i = len(w.groups)
			w.groups = append(w.groups, setGroup{args: []any{name, m.key}})
			w.last[m.key] = i
		}
		g := &w.groups[i]
		g.args = append(g.args, m.member)
		if n := len(g.calls); n == 0 || g.calls[n-1] != c {
			g.calls = append(g.calls, c)
		}
	}
}

func (g *setGroup) removes() bool { return g.args[0] == "srem" }

// queue adds the coalesced commands to p.
func (w *setWrites) queue(ctx context.Context, p redis.Pipeliner) {
	for i := range w.groups {
		g := &w.groups[i]
		g.cmd = redis.NewIntCmd(ctx, g.args...)
		_ = p.Process(ctx, g.cmd)
	}
}

// answer gives each call the first error of a command holding its writes.
func (w *setWrites) answer() {
	for i := range w.groups {
		g := &w.groups[i]
		err := g.cmd.Err()
		if err == nil {
			continue
		}
		for _, c := range g.calls {
			if c.writesErr == nil {
				c.writesErr = err
			}
		}
	}
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
