package viewers

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

func abuseConfig(v *cfgViewers) {
	v.StreamPartitions = 1
	v.SessionRate, v.SessionBurst = 1000, 1000
	v.RuleMaxPerMinute = 8
}

// A session heartbeating far beyond a human page is denylisted by the
// scanner; ingest then answers it 204 but no longer counts it.
func TestScannerDenylistsAndIngestStopsCounting(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{cfg: abuseConfig, parts: []string{"heartbeat", "count", "abuse"}})
	resp := e.post("abuse-a", "", nil)
	cookie := sessionCookie(resp, e.cfg.CookieName)
	for i := 0; i < 12; i++ {
		require.Equal(t, http.StatusNoContent, e.post("abuse-a", cookie, nil).StatusCode)
	}
	db := testenv.Postgres(t)
	var rule, reason string
	testenv.Eventually(t, 10*time.Second, func() bool {
		err := db.QueryRow(t.Context(), `SELECT rule, reason FROM viewers_denylist WHERE subject = $1`,
			sessionSubject(mustVerify(t, e, cookie))).Scan(&rule, &reason)
		return err == nil
	}, "the session is denylisted")
	require.Equal(t, "rate", rule)
	require.Contains(t, reason, "heartbeats within a minute")

	testenv.Eventually(t, 5*time.Second, func() bool {
		return e.mod.deny.denied(mustVerify(t, e, cookie), 0, time.Now())
	}, "ingest picked up the denylist")
	require.Equal(t, http.StatusNoContent, e.post("abuse-b", cookie, nil).StatusCode)
	e.flush()
	require.Equal(t, int64(0), e.countOf("abuse-b").Count, "a denylisted session is not counted")
	require.GreaterOrEqual(t, e.metric(e.mod.m.heartbeats.WithLabelValues("denied")), float64(1))
}

func mustVerify(t *testing.T, e *env, cookie string) uint64 {
	h, _, reason := e.mod.sessions.verify(cookie, time.Now())
	require.Empty(t, reason)
	return h
}

// An entry that cannot be scored is tried abuse_max_tries times, then
// moved to the dead-letter stream; the partition goes on.
func TestPoisonEntriesGoToTheDeadLetterStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{cfg: abuseConfig, parts: []string{"heartbeat", "abuse"}})
	ctx := t.Context()
	stream := e.mod.keys.stream(0)
	require.NoError(t, e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"v", "1", "n", "3", "b", "not records"}}).Err())
	// A good heartbeat after it is still scanned.
	require.Equal(t, http.StatusNoContent, e.post("poison", "", nil).StatusCode)

	testenv.Eventually(t, 15*time.Second, func() bool {
		n, _ := e.rdb.XLen(ctx, e.mod.keys.deadLetters()).Result()
		return n == 1
	}, "the poison entry reached the dead-letter stream")
	dl, err := e.rdb.XRange(ctx, e.mod.keys.deadLetters(), "-", "+").Result()
	require.NoError(t, err)
	require.Equal(t, "delivered 3 times", dl[0].Values["why"])
	require.Equal(t, stream, dl[0].Values["stream"])
	require.Contains(t, dl[0].Values["fields"], `"b":"not records"`)
	require.Equal(t, float64(1), e.metric(e.mod.m.deadLetters))
	testenv.Eventually(t, 5*time.Second, func() bool {
		p, err := e.rdb.XPending(ctx, stream, scanGroup).Result()
		return err == nil && p.Count == 0
	}, "nothing left pending")
	require.GreaterOrEqual(t, e.metric(e.mod.m.streamRecords.WithLabelValues("scanned")), float64(1))
}

// Entries taken by a scanner that died are reclaimed by a live one.
func TestStuckEntriesAreReclaimed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{cfg: abuseConfig, parts: []string{"heartbeat"}})
	ctx := t.Context()
	stream := e.mod.keys.stream(0)
	require.Equal(t, http.StatusNoContent, e.post("stuck", "", nil).StatusCode)
	require.NoError(t, e.mod.recorder.flush(ctx))
	require.NoError(t, e.rdb.XGroupCreateMkStream(ctx, stream, scanGroup, "0").Err())
	got, err := e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: scanGroup, Consumer: "ghost", Streams: []string{stream, ">"}, Count: 10}).Result()
	require.NoError(t, err)
	require.Len(t, got[0].Messages, 1, "the ghost holds the entry and dies")

	sc := e.mod.newScanner()
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = sc.run(sctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	testenv.Eventually(t, 10*time.Second, func() bool {
		p, err := e.rdb.XPending(ctx, stream, scanGroup).Result()
		return err == nil && p.Count == 0
	}, "the stuck entry was reclaimed and acknowledged")
	require.Equal(t, float64(1), e.metric(e.mod.m.reclaimed))
	require.Equal(t, float64(1), e.metric(e.mod.m.streamRecords.WithLabelValues("scanned")))
}

// Two scanners share the partitions and never scan one at the same time.
func TestScannersSharePartitions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{cfg: func(v *cfgViewers) { v.StreamPartitions = 4 }, parts: []string{"heartbeat"}})
	ctx, cancel := context.WithCancel(t.Context())
	a, b := e.mod.newScanner(), e.mod.newScanner()
	done := make(chan struct{}, 2)
	for _, s := range []*scanner{a, b} {
		go func() { _ = s.run(ctx); done <- struct{}{} }()
	}
	t.Cleanup(func() { cancel(); <-done; <-done })
	testenv.Eventually(t, 10*time.Second, func() bool {
		return a.ownedN.Load() == 2 && b.ownedN.Load() == 2
	}, "each scanner owns its share")
	for n := 0; n < 4; n++ {
		require.NoError(t, e.rdb.Get(ctx, e.mod.keys.partitionLease(n)).Err(), "partition %d has an owner", n)
	}
}
