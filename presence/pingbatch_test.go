package presence

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
)

// A ping changes the session's record (and costs a session step) only
// when it reports activity the record does not hold yet.
func TestOnlyPingsReportingActivityStepTheSession(t *testing.T) {
	t.Parallel()
	now := time.Now().UnixNano()
	c := &client{g: &gateway{cfg: config.Default().Presence}}
	c.lastAct.Store(now - int64(10*time.Second))
	idleSince := func(d time.Duration) int64 {
		return time.Duration(time.Now().UnixNano() - now + int64(d)).Milliseconds()
	}
	require.False(t, c.reportsActivity("none", 0), "a bare ping")
	require.False(t, c.reportsActivity("idle_ms", idleSince(10*time.Second)), "idle since the interaction recorded")
	require.False(t, c.reportsActivity("idle_ms", idleSince(20*time.Second)), "idle since before it")
	require.True(t, c.reportsActivity("idle_ms", idleSince(5*time.Second)), "an interaction after it")
	require.True(t, c.reportsActivity("active", 0))
	require.True(t, c.reportsActivity("inactive", 0))
	c.inactive.Store(true)
	require.True(t, c.reportsActivity("idle_ms", idleSince(10*time.Second)), "a device declared inactive reports any idle time")
}
