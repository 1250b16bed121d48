package presence_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
)

// The sample production configuration loads, validates, and uses the
// contacts policy; the zero-config default is open.
func TestSampleProductionConfig(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(config.Source{File: "../deploy/presenced.production.yaml"})
	require.NoError(t, err)
	require.Equal(t, config.PresencePolicyContacts, cfg.Presence.Policy)
	require.False(t, cfg.Auth.DevSecrets)
	require.Equal(t, config.PresencePolicyOpen, config.Default().Presence.Policy)
}

func TestPresenceConfigValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"PRESENCED_PRESENCE_POLICY=friends"}, "presence.policy"},
		{[]string{"PRESENCED_PRESENCE_MANUAL_STATUSES=busy,online"}, "presence.manual_statuses"},
		{[]string{"PRESENCED_PRESENCE_MANUAL_STATUSES=busy,busy"}, "presence.manual_statuses"},
		{[]string{"PRESENCED_PRESENCE_IDLE_THRESHOLD=0s"}, "presence.idle_threshold"},
		{[]string{"PRESENCED_PRESENCE_MISS_BUDGET=0"}, "presence.miss_budget"},
		{[]string{"PRESENCED_PRESENCE_SHARDS=0"}, "presence.shards"},
		{[]string{"PRESENCED_PRESENCE_MAX_FRAME_BYTES=10"}, "presence.max_frame_bytes"},
		{[]string{"PRESENCED_PRESENCE_WEBHOOK_URL=ftp://x"}, "presence.webhook.url"},
		// A tick that would only spin (1ns ran a core at 100 % with no
		// connection at all), or one too slow to enforce the slow-client drop.
		{[]string{"PRESENCED_PRESENCE_COALESCE_TICK=1ns"}, "presence.coalesce_tick: must be at least 10ms"},
		{[]string{"PRESENCED_PRESENCE_COALESCE_TICK=1ms"}, "presence.coalesce_tick: must be at least 10ms"},
		{[]string{"PRESENCED_PRESENCE_COALESCE_TICK=1m"}, "presence.coalesce_tick: must not exceed presence.slow_client_timeout"},
		{[]string{"PRESENCED_PRESENCE_MAX_OPENING=-1"}, "presence.max_opening"},
		{[]string{"PRESENCED_PRESENCE_BURST_HEAP_BYTES=-1"}, "presence.burst_heap_bytes: must be within 0.."},
		{[]string{"PRESENCED_PRESENCE_BURST_HEAP_BYTES=8589934592"}, "presence.burst_heap_bytes: must be within 0.."},
		{[]string{"PRESENCED_PRESENCE_OPENING_WAIT=1m"}, "presence.opening_wait"},
		{[]string{"PRESENCED_PRESENCE_WEBHOOK_URL=https://x.example", "PRESENCED_PRESENCE_WEBHOOK_SECRET=short"}, "presence.webhook.secret"},
	} {
		_, err := config.Load(config.Source{Environ: tc.env})
		require.Error(t, err, "%v", tc.env)
		require.Contains(t, err.Error(), tc.want)
	}
}
