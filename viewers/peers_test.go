package viewers

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBundleNeedsTheAPIKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{cfg: func(v *cfgViewers) { v.Region = "eu" }})
	addAll(t, e, "bundled", hashes(11, 300), baseTier)
	resp, _ := e.get("/v1/viewers/bundled/bundle", nil)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, body := e.get("/v1/viewers/bundled/bundle", http.Header{"X-Api-Key": {e.apiKey}})
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var b bundleJSON
	require.NoError(t, json.Unmarshal([]byte(body), &b))
	require.Equal(t, "eu", b.Region)
	raw, err := base64.StdEncoding.DecodeString(b.HLL)
	require.NoError(t, err)
	require.Equal(t, "HYLL", string(raw[:4]))
}

// A region merges its peers' registers into its count: the union, never
// the sum, so a viewer seen in both regions counts once.
func TestPeerRegionsAreMerged(t *testing.T) {
	t.Parallel()
	us := newEnv(t, envOpts{cfg: func(v *cfgViewers) { v.Region = "us" }})
	hs := hashes(21, 1500)
	addAll(t, us, "global", hs[500:], baseTier)
	eu := newEnv(t, envOpts{cfg: func(v *cfgViewers) {
		v.Region = "eu"
		v.Peers = []string{"us=" + us.srv.URL}
		v.PeerAPIKey = us.apiKey
		v.CountTimeout = time.Second
	}})
	addAll(t, eu, "global", hs[:1000], baseTier)
	requireNear(t, 1000, us.countOf("global").Count)
	got := eu.countOf("global").Count
	t.Logf("eu 1000 + us 1000 sessions, 500 shared: merged count %d", got)
	requireNear(t, 1500, got)
	require.Equal(t, float64(1), eu.metric(eu.mod.m.peerMerges.WithLabelValues("ok")))
}

// A peer slower than peer_timeout is left out; the local count is served
// and the timeout counted.
func TestSlowPeerFallsBackToLocal(t *testing.T) {
	t.Parallel()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(30 * time.Second):
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	e := newEnv(t, envOpts{cfg: func(v *cfgViewers) {
		v.Peers = []string{"far=" + slow.URL}
		v.PeerAPIKey = "k"
		v.PeerTimeout = 200 * time.Millisecond
	}})
	addAll(t, e, "local-only", hashes(31, 40), baseTier)
	// The peer answers after 30 s; an answer well before that comes from
	// the peer timeout.
	start := time.Now()
	got := e.countOf("local-only")
	require.Less(t, time.Since(start), 10*time.Second, "the peer timeout bounds the read")
	require.False(t, got.Stale)
	requireNear(t, 40, got.Count)
	require.Equal(t, float64(1), e.metric(e.mod.m.peerMerges.WithLabelValues("timeout")))
}
