package presence

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

// The status hash lives while the user is online and expires
// offline_retention after they went offline: the session step sets the
// expiry once when the last session ends (later steps of an offline user
// do not push it back), and removes it when a session opens, also from a
// hash that was left expiring without the step's mark.
func TestStatusExpiresOnlyWhileOffline(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	m := newTestModule(t, rdb, testenv.Prefix(t), nil)
	ctx := testenv.Context(t)
	key := m.keys.user("ttl").status
	pttl := func() time.Duration { return rdb.PTTL(ctx, key).Val() }

	res, err := m.st.step(ctx, "ttl", "open", "s1")
	require.NoError(t, err)
	require.Equal(t, StatusOnline, res.Status.Status)
	require.Equal(t, time.Duration(-1), pttl(), "online: no expiry")

	res, err = m.st.step(ctx, "ttl", "close", "s1")
	require.NoError(t, err)
	require.Equal(t, StatusOffline, res.Status.Status)
	first := pttl()
	require.Greater(t, first, m.cfg.OfflineRetention-time.Minute, "offline: kept for the retention")

	require.NoError(t, rdb.PExpire(ctx, key, time.Hour).Err())
	res, err = m.st.step(ctx, "ttl", "close", "s1")
	require.NoError(t, err)
	require.Equal(t, "absent", res.Result)
	require.LessOrEqual(t, pttl(), time.Hour, "a later step of an offline user keeps the expiry it has")

	_, err = m.st.step(ctx, "ttl", "open", "s2")
	require.NoError(t, err)
	require.Equal(t, time.Duration(-1), pttl(), "back online: the expiry is gone")
	require.False(t, rdb.HExists(ctx, key, "x").Val())

	// A hash expiring without the mark (written by an older build).
	require.NoError(t, rdb.PExpire(ctx, key, time.Hour).Err())
	_, err = m.st.step(ctx, "ttl", "open", "s3")
	require.NoError(t, err)
	require.Equal(t, time.Duration(-1), pttl())

	v := rdb.HGet(ctx, key, "v").Val()
	require.Equal(t, "3", v, "online, offline, online: three changes")
}
