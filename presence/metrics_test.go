package presence_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

func metricValue(t *testing.T, s *server, line string) bool {
	t.Helper()
	_, body := httpDo(t, "GET", s.base+"/metrics", "", nil)
	for _, l := range strings.Split(body, "\n") {
		if l == line {
			return true
		}
	}
	return false
}

// Followers of one user on one gateway share one upstream subscription;
// the module's metrics are exported and carry no user ids.
func TestOneSubscriptionPerSubjectAndMetrics(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	s := startServer(t, cfg)
	alice := connect(t, s, "alice")
	carol := connect(t, s, "carol")
	alice.subscribe("bob")
	carol.subscribe("bob")
	require.True(t, metricValue(t, s, "presenced_presence_followed_subjects 1"))
	// One topic per followed user plus the control channels.
	require.True(t, metricValue(t, s, "presenced_hub_topics 5"))

	bob := connect(t, s, "bob")
	alice.statusOf("bob", "online")
	carol.statusOf("bob", "online")
	bob.send("session:disconnect", nil)
	alice.statusOf("bob", "offline")
	carol.statusOf("bob", "offline")
	alice.subscribe()
	carol.subscribe()
	testenv.Eventually(t, 2*time.Second, func() bool {
		return metricValue(t, s, "presenced_presence_followed_subjects 0")
	}, "released")

	_, body := httpDo(t, "GET", s.base+"/metrics", "", nil)
	for _, name := range []string{
		"presenced_presence_connections 2",
		`presenced_presence_sessions{state="active"}`,
		`presenced_presence_status_changes_total{status="online"}`,
		`presenced_presence_status_changes_total{status="offline"}`,
		"presenced_presence_push_latency_seconds_bucket",
		"presenced_presence_send_queue_depth_bucket",
		"presenced_presence_resyncs_total",
		"presenced_presence_slow_client_drops_total",
		`presenced_presence_stream_pending{stream="pings"}`,
		`presenced_presence_stream_lag{stream="pings"}`,
		`presenced_presence_stream_oldest_pending_seconds{stream="events"}`,
		"presenced_presence_tracked_sessions",
		`presenced_presence_cleanups_total{outcome="absent",reason="disconnect"}`,
	} {
		require.Contains(t, body, name)
	}
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "presenced_presence") {
			require.NotContains(t, l, "alice")
			require.NotContains(t, l, "bob")
		}
	}
}
