package presence

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/web/wire"
)

// The hand-built presence:updated frame says exactly what the generic
// encoder would: same envelope, same statuses, ts aside.
func TestUpdatedFrameMatchesTheEnvelope(t *testing.T) {
	t.Parallel()
	sts := []*Status{
		{User: "bob", Status: "busy", Since: 1700000000100, LastActiveAt: 1699999980000, V: 7, TS: 1700000000101},
		{User: `we"ird\u`, Status: StatusOffline},
	}
	states := []*state{newState(sts[0]), newState(sts[1])}
	for _, tc := range []struct {
		resync bool
		id     string
		list   []*state
	}{
		{false, "", states},
		{true, "", states},
		{false, `r"1</script>`, states[:1]},
		{true, "s1", nil},
	} {
		users := make([]Status, 0, len(tc.list))
		for _, s := range tc.list {
			users = append(users, s.st.public())
		}
		want := wire.EventFrame(EventPresenceUpdated, UpdatedPayload{Users: users, Resync: tc.resync}, tc.id)
		got := updatedFrame(tc.list, tc.resync, tc.id)
		require.True(t, json.Valid(got), "%s", got)
		var a, b map[string]any
		require.NoError(t, json.Unmarshal(want, &a))
		require.NoError(t, json.Unmarshal(got, &b))
		require.NotZero(t, b["ts"])
		delete(a, "ts")
		delete(b, "ts")
		require.Equal(t, a, b)
	}
}
