package presence

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

// The member writes of a batch's calls become one command per set and run
// of the same kind, keep their order on each key, and each call gets the
// error of a command that carried its writes, not another call's.
func TestSetWritesCoalescePerKeyInOrder(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	ctx := context.Background()
	p := testenv.Prefix(t)
	a, b, str := p+"{a}", p+"{b}", p+"{str}"
	require.NoError(t, rdb.Set(ctx, str, "not a set", 0).Err())
	add := func(key, m string) memberWrite { return memberWrite{key: key, member: m} }
	del := func(key, m string) memberWrite { return memberWrite{key: key, member: m, remove: true} }
	calls := []*batchCall{
		{writes: []memberWrite{add(a, "x"), add(b, "x")}},
		{writes: []memberWrite{add(a, "y"), del(b, "x")}},
		{writes: []memberWrite{del(a, "y"), add(b, "x")}},
		{writes: []memberWrite{add(a, "z")}},
		{writes: []memberWrite{add(str, "x")}},
	}
	w := setWritesPool.Get().(*setWrites)
	defer w.release()
	var cmds []redis.Cmder
	_, err := rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for _, c := range calls {
			w.add(c)
		}
		w.queue(ctx, pl)
		return nil
	})
	require.Error(t, err, "the write to a string fails")
	w.answer()
	for _, g := range w.groups {
		cmds = append(cmds, g.cmd)
	}
	var got []string
	for _, c := range cmds {
		got = append(got, fmt.Sprint(c.Args()))
	}
	require.Equal(t, []string{
		"[sadd " + a + " x y]", "[sadd " + b + " x]", "[srem " + b + " x]",
		"[srem " + a + " y]", "[sadd " + b + " x]", "[sadd " + a + " z]",
		"[sadd " + str + " x]",
	}, got, "one command per key and run of a kind, in the order asked")

	members := func(key string) []string {
		m, err := rdb.SMembers(ctx, key).Result()
		require.NoError(t, err)
		return m
	}
	require.ElementsMatch(t, []string{"x", "z"}, members(a))
	require.ElementsMatch(t, []string{"x"}, members(b))
	for i, c := range calls[:4] {
		require.NoError(t, c.writesErr, "call %d", i)
	}
	require.ErrorContains(t, calls[4].writesErr, "WRONGTYPE")
}

// Follower-set writes of connections in flight together share commands:
// eight users following the same five send five SADDs, not forty.
func TestFollowerWritesInFlightShareCommands(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	m := newTestModule(t, rdb, testenv.Prefix(t), nil)
	subjects := []string{"s1", "s2", "s3", "s4", "s5"}
	h := newHoldFirst()
	ctx := h.Mark(context.Background())
	rdb.AddHook(h)
	h.Start()
	const users = 8
	behindHeld(t, ctx, m, h, users, nil, func(i int) error {
		return m.st.batch.writeMembers(ctx, m.st.followerWrites(fmt.Sprintf("u%d", i), subjects, nil))
	})
	_, names := h.Count()
	sadds := 0
	for _, n := range names {
		if n == "sadd" {
			sadds++
		}
	}
	require.Equal(t, len(subjects), sadds, "commands: %v", names)
	var want []string
	for i := range users {
		want = append(want, fmt.Sprintf("u%d", i))
	}
	for _, s := range subjects {
		got, err := rdb.SMembers(ctx, m.keys.user(s).followers).Result()
		require.NoError(t, err)
		require.ElementsMatch(t, want, got, "followers of %s", s)
	}
}
