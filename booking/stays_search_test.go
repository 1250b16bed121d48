package booking

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/outbox"
	"github.com/presenced/presenced/internal/spectest"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/web"
)

// viewerBoard stands in for the viewers module behind ViewerCounts.
type viewerBoard struct {
	mu     sync.Mutex
	counts map[string]int64
}

func (v *viewerBoard) ViewerCount(_ context.Context, hotel string) (int64, bool, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	n, ok := v.counts[hotel]
	if !ok {
		return 0, false, errors.New("no count")
	}
	return n, false, nil
}

type searchBundle struct {
	*stayBundle
	search *search
	url    string
	relay  *outbox.Relay
	views  *viewerBoard
}

func setupSearch(t *testing.T, rdb redis.UniversalClient) *searchBundle {
	t.Helper()
	b := setupStays(t, setupWith(t, testenv.Postgres(t), rdb))
	ro, err := pgxpool.New(context.Background(), testenv.ReadOnlyURL(t))
	require.NoError(t, err)
	t.Cleanup(ro.Close)
	views := &viewerBoard{counts: map[string]int64{}}
	s, err := newSearch(searchDeps{ReadOnly: ro, Redis: rdb, Keys: b.ks, Viewers: views, Config: b.cfg, Metrics: b.sm, Log: testenv.Logger()})
	require.NoError(t, err)
	srv, err := web.NewServer(config.Default(), prometheus.NewRegistry(), testenv.Logger())
	require.NoError(t, err)
	spectest.Validate(t, srv.Echo)
	s.Routes(srv.Echo.Group(""))
	ts := httptest.NewServer(srv.Echo)
	t.Cleanup(ts.Close)
	relay, err := outbox.NewRelay(outbox.RelayConfig{Pool: b.db, Redis: rdb, Stream: b.ks.Global("outbox").Key("events"),
		StreamMaxLen: 1000, Batch: 100, PollInterval: 10 * time.Millisecond, Retention: time.Hour, Log: testenv.Logger()})
	require.NoError(t, err)
	relay.Handle(KindStayInventoryChanged, newSearchInvalidator(rdb, b.ks).Handle)
	return &searchBundle{stayBundle: b, search: s, url: ts.URL, relay: relay, views: views}
}

// relayPass runs the relay over everything committed so far: one relay
// period's work.
func (sb *searchBundle) relayPass(t *testing.T) {
	t.Helper()
	for {
		n, err := sb.relay.RelayOnce(context.Background())
		require.NoError(t, err)
		if n < 100 {
			return
		}
	}
}

func (sb *searchBundle) find(t *testing.T, query string, hdr ...string) (*http.Response, SearchResult) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, sb.url+"/v1/hotels?"+query, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var res SearchResult
	if resp.StatusCode == http.StatusOK {
		require.NoError(t, json.Unmarshal(body, &res))
	}
	return resp, res
}

func offerOf(res SearchResult, hotel string) *HotelOffer {
	for i := range res.Hotels {
		if res.Hotels[i].ID == hotel {
			return &res.Hotels[i]
		}
	}
	return nil
}

// Search shows a hotel as full once the relay has passed over its last
// room's hold (the cached answer is dropped by the outbox, not by time),
// and free again once the hold expired and that change was relayed. Each
// offer carries the hotel's live viewer count. Not parallel: the relay
// publishes every test's events, and their effects use this test's keys.
func TestSearchFollowsInventoryThroughTheOutbox(t *testing.T) {
	sb := setupSearch(t, testenv.Redis(t))
	cheap, city := sb.hotel(t, "std:1x2@9000")
	dear, _ := sb.hotel(t, "std:2x2@20000,ste:1x4@50000", func(s *HotelSpec) { s.City = city })
	sb.views.counts[cheap] = 42
	query := "city=" + city + "&checkIn=" + night(3) + "&checkOut=" + night(5) + "&guests=2"

	resp, res := sb.find(t, query)
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "public, max-age=5", resp.Header.Get("Cache-Control"))
	require.NotEmpty(t, resp.Header.Get("ETag"))
	require.Equal(t, []string{cheap, dear}, ids(res), "cheapest first")
	require.Equal(t, 2, res.Nights)
	require.Equal(t, int64(18000), res.Hotels[0].LowestTotal)
	require.Equal(t, int64(42), *res.Hotels[0].Viewers, "the live viewer count, from the viewers module")
	require.Nil(t, res.Hotels[1].Viewers, "no count known: none shown")
	require.Len(t, res.Hotels[1].RoomTypes, 2)

	resp2, _ := sb.find(t, query, "If-None-Match", resp.Header.Get("ETag"))
	require.Equal(t, http.StatusNotModified, resp2.StatusCode)

	status, r, err := sb.holdStay(t, cheap, "last", "k", StayHoldRequest{RoomType: "std", CheckIn: night(4), CheckOut: night(6), Rooms: 1})
	require.NoError(t, err)
	require.Equal(t, 201, status)
	_, res = sb.find(t, query)
	require.NotNil(t, offerOf(res, cheap), "before the relay passes, the cached answer stands")

	sb.relayPass(t)
	resp, res = sb.find(t, query)
	require.Equal(t, 200, resp.StatusCode)
	require.Nil(t, offerOf(res, cheap), "after one relay pass the full hotel is gone")
	require.Equal(t, []string{dear}, ids(res))
	_, other := sb.find(t, "city="+city+"&checkIn="+night(1)+"&checkOut="+night(3))
	require.NotNil(t, offerOf(other, cheap), "other nights are still free")

	sb.expireNow(t, r.ID)
	_, err = sb.expiry.ExpireOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, StatusExpired, sb.status(t, r.ID))
	sb.relayPass(t)
	_, res = sb.find(t, query)
	require.NotNil(t, offerOf(res, cheap), "free again after the hold expired")
}

func ids(res SearchResult) []string {
	var out []string
	for _, h := range res.Hotels {
		out = append(out, h.ID)
	}
	return out
}

// Guests and rooms filter room types; a hotel none of whose types fit is
// left out. Bad queries are 400s.
func TestSearchFiltersAndRefuses(t *testing.T) {
	t.Parallel()
	sb := setupSearch(t, testenv.Redis(t))
	small, city := sb.hotel(t, "std:3x2@9000")
	big, _ := sb.hotel(t, "std:1x2@8000,fam:2x4@16000", func(s *HotelSpec) { s.City = city })
	base := "city=" + city + "&checkIn=" + night(3) + "&checkOut=" + night(4)

	_, res := sb.find(t, base+"&guests=4")
	require.Equal(t, []string{big}, ids(res), "only a family room sleeps 4")
	require.Equal(t, []RoomTypeOffer{{ID: "fam", Name: "fam", Capacity: 4, Available: 2, Total: 16000}}, res.Hotels[0].RoomTypes)
	_, res = sb.find(t, base+"&rooms=3")
	require.Equal(t, []string{small}, ids(res), "three rooms of one type only at the small hotel")
	require.Equal(t, int64(27000), res.Hotels[0].LowestTotal)
	_, res = sb.find(t, base+"&rooms=2&guests=8")
	require.Equal(t, []string{big}, ids(res))
	_, res = sb.find(t, "city=nowhere-at-all&checkIn="+night(3)+"&checkOut="+night(4))
	require.Empty(t, res.Hotels)
	require.NotNil(t, res.Hotels, "an empty list, not null")

	for _, q := range []string{
		"", "city=" + city, "city=Lisbon%20Old&checkIn=" + night(3) + "&checkOut=" + night(4),
		base + "&guests=0", base + "&guests=two", base + "&rooms=99", base + "&rooms=1&rooms=2",
		base + "&sort=price", "city=" + city + "&checkIn=" + night(4) + "&checkOut=" + night(3),
		"city=" + city + "&checkIn=" + night(3) + "&checkOut=" + night(40),
		"city=" + city + "&checkIn=2001-01-01&checkOut=2001-01-02",
		"city=" + city + "&checkIn=" + night(3) + "T00:00&checkOut=" + night(4),
	} {
		resp, _ := sb.find(t, q)
		require.Equal(t, 400, resp.StatusCode, q)
	}
}

// A reader that queried before an inventory change was relayed cannot
// store its answer after the invalidation: the city's version moved.
func TestSearchFillLosesToAnInvalidation(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	sb := setupSearch(t, rdb)
	ctx := context.Background()
	k := keys{ks: sb.ks}
	verKey, cacheKey := k.searchVersion("somecity"), k.searchCache("somecity")
	fill := func(ver, field string) int {
		n, err := searchFill.Run(ctx, rdb, []string{verKey, cacheKey}, ver, field, "answer", 60000).Int()
		require.NoError(t, err)
		return n
	}
	require.Equal(t, 1, fill("0", "2030-01-01|2030-01-03"))
	require.Equal(t, 1, fill("0", "2030-01-03|2030-01-05"))
	require.Equal(t, 1, fill("0", "2029-12-20|2029-12-31"))
	require.NoError(t, newSearchInvalidator(rdb, sb.ks).Handle(ctx, outbox.Event{
		Payload: []byte(`{"city":"somecity","from":"2030-01-02","to":"2030-01-04"}`)}))
	left, err := rdb.HKeys(ctx, cacheKey).Result()
	require.NoError(t, err)
	require.Equal(t, []string{"2029-12-20|2029-12-31"}, left, "answers of stays overlapping the changed nights are dropped, others kept")
	require.NoError(t, newSearchInvalidator(rdb, sb.ks).Handle(ctx, outbox.Event{Payload: []byte(`{"city":"somecity"}`)}))
	n, err := rdb.HLen(ctx, cacheKey).Result()
	require.NoError(t, err)
	require.Zero(t, n, "without a range every answer goes")
	stored, err := searchFill.Run(ctx, rdb, []string{verKey, cacheKey}, "1", "f", "stale", 60000).Int()
	require.NoError(t, err)
	require.Zero(t, stored, "an answer read before the change is not stored after it")
	stored, err = searchFill.Run(ctx, rdb, []string{verKey, cacheKey}, "2", "f", "fresh", 60000).Int()
	require.NoError(t, err)
	require.Equal(t, 1, stored)
}

// With Redis down the search still answers, straight from the read-only
// login.
func TestSearchWithoutRedis(t *testing.T) {
	t.Parallel()
	srv := testenv.NewRedisServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.URL[len("redis://"):], MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	sb := setupSearch(t, rdb)
	hotel, city := sb.hotel(t, "std:1x2@9000")
	require.NoError(t, srv.Stop())
	resp, res := sb.find(t, "city="+city+"&checkIn="+night(3)+"&checkOut="+night(4))
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, []string{hotel}, ids(res))
}
