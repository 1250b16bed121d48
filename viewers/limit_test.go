package viewers

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

// The test server trusts no proxy, so traffic from other networks is
// driven through the limiter directly.
func TestPrefixBucketIsSharedThroughRedis(t *testing.T) {
	t.Parallel()
	cfg := func(v *cfgViewers) {
		v.PrefixRate, v.PrefixBurst, v.PrefixSyncThreshold = 20, 20, 5
		v.PrefixSyncInterval = 20 * time.Millisecond
	}
	prefix := testenv.Prefix(t)
	a := newEnv(t, envOpts{cfg: cfg, prefix: prefix})
	b := newEnv(t, envOpts{cfg: cfg, prefix: prefix})
	p, ok := prefixOf("203.0.113.7")
	require.True(t, ok)
	require.Equal(t, "203.0.113.0/24", p.String())
	// Two processes each admit traffic from one /24; together they exceed
	// its bucket, and both end up refusing it.
	deadline := time.Now().Add(5 * time.Second)
	var blockedA, blockedB bool
	for time.Now().Before(deadline) && !(blockedA && blockedB) {
		okA, _ := a.mod.prefixes.allow(p, time.Now().UnixNano())
		okB, _ := b.mod.prefixes.allow(p, time.Now().UnixNano())
		blockedA, blockedB = blockedA || !okA, blockedB || !okB
		time.Sleep(2 * time.Millisecond)
	}
	require.True(t, blockedA && blockedB, "the shared bucket blocks the prefix everywhere")
	other, _ := prefixOf("198.51.100.1")
	okOther, _ := a.mod.prefixes.allow(other, time.Now().UnixNano())
	require.True(t, okOther, "other networks are unaffected")

	// Over HTTP the blocked prefix gets 429 with Retry-After.
	loop, _ := prefixOf("127.0.0.1")
	a.mod.prefixes.mu.Lock()
	st := a.mod.prefixes.states[loop]
	if st == nil {
		st = &prefixState{}
		a.mod.prefixes.states[loop] = st
	}
	a.mod.prefixes.mu.Unlock()
	st.blockedUntil.Store(time.Now().Add(3 * time.Second).UnixNano())
	resp := a.post("limited", "", nil)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, "3", resp.Header.Get("Retry-After"))
	require.Greater(t, a.metric(a.mod.m.prefixBlocks), float64(0))
}

// When the rate-limit Redis is down the limiter fails open and counts it.
func TestPrefixLimiterFailsOpen(t *testing.T) {
	t.Parallel()
	srv := testenv.NewRedisServer(t)
	limitRdb := testenv.RedisClient(t, srv.URL, func(o *redis.Options) { o.DialTimeout, o.MaxRetries = 100*time.Millisecond, -1 })
	require.NoError(t, srv.Stop())
	e := newEnv(t, envOpts{limitRdb: limitRdb, cfg: func(v *cfgViewers) {
		v.PrefixRate, v.PrefixBurst, v.PrefixSyncThreshold = 5, 5, 2
		v.SessionRate, v.SessionBurst = 1000, 1000
	}})
	for i := 0; i < 30; i++ {
		require.Equal(t, http.StatusNoContent, e.post("open", "", nil).StatusCode)
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		return e.metric(e.mod.m.limitFailOpen) > 0
	}, "fail-open is counted")
	require.Greater(t, e.metric(e.mod.m.limitErrors), float64(0))
	e.flush()
	requireNear(t, 30, e.countOf("open").Count)
}

func TestPrefixesOfAddresses(t *testing.T) {
	t.Parallel()
	for ip, want := range map[string]string{
		"192.0.2.200":           "192.0.2.0/24",
		"::ffff:192.0.2.9":      "192.0.2.0/24",
		"2001:db8:abcd:12::1":   "2001:db8:abcd::/48",
		"2001:db8:abcd:ffff::9": "2001:db8:abcd::/48",
	} {
		p, ok := prefixOf(ip)
		require.True(t, ok, ip)
		require.Equal(t, want, p.String(), ip)
		back, ok := parsePrefix(p.String())
		require.True(t, ok)
		require.Equal(t, p, back)
	}
	_, ok := prefixOf("not an ip")
	require.False(t, ok)
}

// BenchmarkSessionLimiter is the per-session token bucket of every
// heartbeat: 20,000 sessions, parallel, mostly allowed.
func BenchmarkSessionLimiter(b *testing.B) {
	l := newSessionLimiter(10, 10, 1<<21)
	var next atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1)
			l.allow(i%20_000*0x9e3779b97f4a7c15, time.Now().UnixNano())
		}
	})
}

// The session bucket: a burst, then one heartbeat per 1/rate, with the
// wait until the next token said; sessions do not share buckets.
func TestSessionLimiterBurstRateAndWait(t *testing.T) {
	l := newSessionLimiter(10, 3, 1000)
	now := time.Unix(1_900_000_000, 0).UnixNano()
	for i := 0; i < 3; i++ {
		ok, _ := l.allow(1, now)
		require.True(t, ok, "burst %d", i)
	}
	ok, wait := l.allow(1, now)
	require.False(t, ok)
	require.InDelta(t, float64(100*time.Millisecond), float64(wait), float64(time.Millisecond))
	ok, _ = l.allow(2, now)
	require.True(t, ok, "another session has its own bucket")
	ok, wait = l.allow(1, now+int64(40*time.Millisecond))
	require.False(t, ok)
	require.InDelta(t, float64(60*time.Millisecond), float64(wait), float64(time.Millisecond))
	ok, _ = l.allow(1, now+int64(100*time.Millisecond))
	require.True(t, ok, "one token a tenth of a second")
	ok, _ = l.allow(1, now+int64(10*time.Second))
	require.True(t, ok, "refilled")
}
