package presence

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

// Idle stream consumers wait in one blocking read of every shard instead of
// reading each shard every poll (about 380 reads a second in production
// with nothing to read), and a session still expires on time meanwhile.
func TestIdleConsumersBlockInsteadOfPolling(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	m := newTestModule(t, rdb, testenv.Prefix(t), nil)
	rt := &testenv.RedisTrips{}
	rdb.AddHook(rt)
	runLifecycle(t, m)
	openSession(t, m, "idler")
	rt.Start()
	// The window is the session's life: no ping after the first, so it
	// expires after ping_interval × miss_budget (2 s here).
	testenv.Eventually(t, 15*time.Second, func() bool {
		return statusOf(t, m, "idler").Status == StatusOffline
	}, "the session expired")
	reads := 0
	_, names := rt.Count()
	for _, name := range names {
		if name == "xreadgroup" {
			reads++
		}
	}
	// Polling read 2 shards every 10 ms per consumer: 800 reads in 2 s.
	require.Less(t, reads, 100, "stream reads while the consumers had little to do")
}
