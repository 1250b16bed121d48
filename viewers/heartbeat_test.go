package viewers

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/keyring"
)

// One browser heartbeating many times is one viewer; a hundred browsers
// are a hundred.
func TestHeartbeatsCountDistinctSessions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	c := e.client()
	var cookies []string
	for i := 0; i < 5; i++ {
		resp := c.heartbeat("h1")
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
		if i == 0 {
			cookies = append(cookies, sessionCookie(resp, e.cfg.CookieName))
			require.NotEmpty(t, cookies[0], "first contact issues a cookie")
		}
	}
	e.flush()
	got := e.countOf("h1")
	require.Equal(t, int64(1), got.Count)
	require.Equal(t, "h1", got.Hotel)
	require.False(t, got.Stale)

	for i := 0; i < 99; i++ {
		resp := e.client().heartbeat("h1")
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
		cookies = append(cookies, sessionCookie(resp, e.cfg.CookieName))
	}
	e.flush()
	// The hundred sessions are random: two in one HyperLogLog register
	// (about one run in three hundred has three such pairs) read as one,
	// so the count is the estimate of exactly these sessions.
	estimate := e.estimate(t, cookies)
	require.InDelta(t, 100, estimate, 10, "a hundred sessions")
	require.Equal(t, estimate, e.countOf("h1").Count)
	require.Equal(t, int64(0), e.countOf("never-seen").Count, "a hotel never seen counts 0")
}

func TestCountResponseHeadersAndETag(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.client().heartbeat("etag-hotel")
	e.flush()
	resp, body := e.get("/v1/viewers/etag-hotel/count", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "public, max-age=5, stale-while-revalidate=30", resp.Header.Get("Cache-Control"))
	etag := resp.Header.Get("ETag")
	require.NotEmpty(t, etag)
	require.Contains(t, body, `"approximate":true`)
	require.Contains(t, body, `"stale":false`)
	require.Contains(t, body, `"asOf":"`)
	resp, _ = e.get("/v1/viewers/etag-hotel/count", http.Header{"If-None-Match": {etag}})
	require.Equal(t, http.StatusNotModified, resp.StatusCode)

	resp, body = e.get("/v1/viewers/bad%20id/count", nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, `"code":"bad_request"`)
}

func TestTamperedAndWrongKeyCookiesAreReplaced(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	resp := e.post("cookies", "", nil)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	good := sessionCookie(resp, e.cfg.CookieName)
	require.NotEmpty(t, good)

	// The genuine cookie is kept: no new cookie, same session.
	resp = e.post("cookies", good, nil)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Empty(t, sessionCookie(resp, e.cfg.CookieName))

	// Flip one character of the payload: the signature no longer matches.
	parts := strings.Split(good, ".")
	p := []byte(parts[2])
	if p[3] == 'A' {
		p[3] = 'B'
	} else {
		p[3] = 'A'
	}
	tampered := strings.Join([]string{parts[0], parts[1], string(p), parts[3]}, ".")
	resp = e.post("cookies", tampered, nil)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	replaced := sessionCookie(resp, e.cfg.CookieName)
	require.NotEmpty(t, replaced, "a tampered cookie is replaced")
	require.NotEqual(t, good, replaced)
	issued := []string{good, replaced}

	// A cookie signed by a key this deployment does not know.
	other, _, err := keyring.Generate("k1") // same kid, different key
	require.NoError(t, err)
	otherRing, err := keyring.Parse(other, nil)
	require.NoError(t, err)
	foreign, err := newSessions(otherRing, time.Hour, 16).issue(time.Now())
	require.NoError(t, err)
	resp = e.post("cookies", foreign.setCookie, nil)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.NotEmpty(t, sessionCookie(resp, e.cfg.CookieName))
	issued = append(issued, sessionCookie(resp, e.cfg.CookieName))

	// Garbage and unknown key ids.
	for _, bad := range []string{"garbage", "v1.zz." + parts[2] + "." + parts[3], "v2." + good[3:]} {
		resp = e.post("cookies", bad, nil)
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
		require.NotEmpty(t, sessionCookie(resp, e.cfg.CookieName), bad)
		issued = append(issued, sessionCookie(resp, e.cfg.CookieName))
	}

	e.flush()
	// Counted: the genuine session once, and each replacement session once
	// (they are real new sessions); the tampered and foreign ones never.
	// The count is a HyperLogLog estimate, so it is compared with the
	// estimate of exactly those six sessions rather than with 6: two of
	// them sharing a register would make both read 5.
	require.Len(t, issued, 6)
	require.Equal(t, e.estimate(t, issued), e.countOf("cookies").Count)
	require.Equal(t, float64(2), e.metric(e.mod.m.cookiesReplaced.WithLabelValues(replaceBadSig)), "tampered and foreign")
	require.Equal(t, float64(1), e.metric(e.mod.m.cookiesReplaced.WithLabelValues(replaceUnknownKid)))
	require.GreaterOrEqual(t, e.metric(e.mod.m.cookiesReplaced.WithLabelValues(replaceMalformed)), float64(2))
}

// During a key rotation a cookie of the old key is still accepted, is
// re-signed with the new key, and stays the same session.
func TestKeyRotationKeepsTheSession(t *testing.T) {
	t.Parallel()
	oldSigning, oldVerify, err := keyring.Generate("old")
	require.NoError(t, err)
	oldRing, err := keyring.Parse(oldSigning, nil)
	require.NoError(t, err)
	sess, err := newSessions(oldRing, time.Hour, 16).issue(time.Now())
	require.NoError(t, err)

	newSigning, _, err := keyring.Generate("new")
	require.NoError(t, err)
	ring, err := keyring.Parse(newSigning, []string{oldVerify})
	require.NoError(t, err)
	e := newEnv(t, envOpts{ring: ring})

	resp := e.post("rotation", sess.setCookie, nil)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	resigned := sessionCookie(resp, e.cfg.CookieName)
	require.True(t, strings.HasPrefix(resigned, "v1.new."), resigned)
	resp = e.post("rotation", resigned, nil)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Empty(t, sessionCookie(resp, e.cfg.CookieName))
	e.flush()
	require.Equal(t, int64(1), e.countOf("rotation").Count, "old and re-signed cookie are one session")
}

func TestSessionBurstIsLimited(t *testing.T) {
	t.Parallel()
	// A bucket of 10 that refills once in 1,000 s: however slow the
	// machine, no token comes back while the test runs, so exactly the
	// burst passes (at 10/s, 20 requests spread over more than half a
	// second on a loaded machine got refills and fewer refusals).
	e := newEnv(t, envOpts{cfg: func(v *cfgViewers) { v.SessionRate = 0.001; v.SessionBurst = 10 }})
	resp := e.post("burst", "", nil)
	cookie := sessionCookie(resp, e.cfg.CookieName)
	ok, limited := 1, 0
	for i := 0; i < 19; i++ {
		resp := e.post("burst", cookie, nil)
		switch resp.StatusCode {
		case http.StatusNoContent:
			ok++
		case http.StatusTooManyRequests:
			limited++
			require.NotEmpty(t, resp.Header.Get("Retry-After"))
		default:
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	require.Equal(t, 10, ok, "the burst passes")
	require.Equal(t, 10, limited, "everything over the burst is refused")
	e.flush()
	require.Equal(t, int64(1), e.countOf("burst").Count)
}

func TestBadHotelAndHugeBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	for _, bad := range []string{strings.Repeat("x", 65), "a:b", "a%7Bb%7D", "%C3%A9t%C3%A9", "a%20b"} {
		resp := e.post(bad, "", nil)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, bad)
	}
	resp := e.post("body", "", bytes.NewReader(make([]byte, 2048)))
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	// Without a length (chunked), the limit holds as the body is read.
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/viewers/body/heartbeat", io.MultiReader(strings.NewReader("{"), bytes.NewReader(make([]byte, 4096))))
	req.ContentLength = -1
	r2, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	r2.Body.Close()
	require.Equal(t, http.StatusRequestEntityTooLarge, r2.StatusCode)
	// A small body is fine and ignored.
	require.Equal(t, http.StatusNoContent, e.post("body", "", strings.NewReader(`{"page":"x"}`)).StatusCode)
	e.flush()
	require.Equal(t, int64(1), e.countOf("body").Count, "refused heartbeats count nothing")
	require.Equal(t, float64(5), e.metric(e.mod.m.heartbeats.WithLabelValues("invalid")))
}

// K heartbeats of one hotel within a flush window become one PFADD.
func TestFlushCoalescesIntoOneWrite(t *testing.T) {
	t.Parallel()
	rdb := newTestRedis(t)
	cc := &commandCounter{}
	rdb.AddHook(cc)
	e := newEnv(t, envOpts{rdb: rdb, cfg: func(v *cfgViewers) { v.FlushWindow = time.Hour; v.HotFlushWindow = time.Hour; v.Bucket = 2 * time.Hour }})
	const k = 300
	firstBucket := bucketOf(time.Now(), e.cfg.Bucket)
	for i := 0; i < k; i++ {
		require.Equal(t, http.StatusNoContent, e.client().heartbeat("coalesce").StatusCode)
	}
	cc.reset()
	e.flush()
	require.Equal(t, 1, cc.get("pfadd"), "K=%d heartbeats, one write", k)
	require.Equal(t, 1, cc.get("pexpireat"))
	requireNear(t, k, e.countOf("coalesce").Count)

	// A second window: the key's expiry is already set.
	for i := 0; i < 10; i++ {
		e.client().heartbeat("coalesce")
	}
	cc.reset()
	e.flush()
	require.Equal(t, 1, cc.get("pfadd"))
	// Unless the clock crossed into a new bucket meanwhile (a new key).
	wantExpire := 0
	if bucketOf(time.Now(), e.cfg.Bucket) != firstBucket {
		wantExpire = 1
	}
	require.Equal(t, wantExpire, cc.get("pexpireat"))
	ttl, err := rdb.PTTL(t.Context(), e.mod.keys.hll("coalesce", bucketOf(time.Now(), e.cfg.Bucket), 0)).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, e.cfg.Bucket, "a key lives until it served as the previous bucket")
	require.LessOrEqual(t, ttl, 2*e.cfg.Bucket+e.cfg.Bucket/10)

	// Many hotels in one flush: one PFADD each, one pipeline.
	for i := 0; i < 20; i++ {
		e.client().heartbeat(fmt.Sprintf("many-%d", i))
	}
	cc.reset()
	e.flush()
	require.Equal(t, 20, cc.get("pfadd"))
}

// A new session's cookie is signed once and never verified back: the
// process remembers what it signed, so the session's next heartbeat pays
// no Ed25519 verification. The test swaps in a key that would refuse the
// signature (same key id, another key): the remembered cookie is still the
// session it was issued as, and only a cookie not signed here is checked.
func TestNewSessionIsSignedOnceAndNotVerifiedBack(t *testing.T) {
	t.Parallel()
	signing, _, err := keyring.Generate("k1")
	require.NoError(t, err)
	ring, err := keyring.Parse(signing, nil)
	require.NoError(t, err)
	s := newSessions(ring, time.Hour, 1024)
	now := time.Now()
	sess, err := s.issue(now)
	require.NoError(t, err)
	require.True(t, sess.fresh)

	other, _, err := keyring.Generate("k1")
	require.NoError(t, err)
	s.ring, err = keyring.Parse(other, nil)
	require.NoError(t, err)
	hash, kid, reason := s.verify(sess.setCookie, now.Add(time.Second))
	require.Empty(t, reason, "the cookie signed here is not verified again")
	require.Equal(t, sess.hash, hash)
	require.Equal(t, "k1", kid)

	// A cookie this process did not sign is verified, and refused here.
	foreign, err := newSessions(ring, time.Hour, 16).issue(now)
	require.NoError(t, err)
	_, _, reason = s.verify(foreign.setCookie, now)
	require.Equal(t, replaceBadSig, reason)
}
