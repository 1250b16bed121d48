package viewers

import (
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/presenced/presenced/store"
)

var (
	//go:embed lua/merge_count.lua
	mergeCountLua string
	//go:embed lua/bundle.lua
	bundleLua string

	mergeCountScript = store.NewScript("viewers_merge_count", mergeCountLua)
	bundleScript     = store.NewScript("viewers_bundle", bundleLua)
)

// mergedCount unions the local window with peer registers inside Redis, so
// the merge uses Redis's own HyperLogLog code.
func (c *counter) mergedCount(ctx context.Context, hotel string, keys []string, blobs [][]byte) (int64, error) {
	all := make([]string, 0, len(keys)+len(blobs))
	all = append(all, keys...)
	args := make([]any, len(blobs))
	for i, b := range blobs {
		all = append(all, c.keys.scratch(hotel, store.NewToken()))
		args[i] = b
	}
	c.m.redisCommands.WithLabelValues("merge_count").Inc()
	res, err := mergeCountScript.Run(ctx, c.rdb, all, args...).Int64Slice()
	if err != nil {
		return 0, err
	}
	if len(res) != 2 {
		return 0, errors.New("merge count: unexpected reply")
	}
	if res[1] == 0 {
		c.log.Warn("viewers: a peer bundle is not a valid HyperLogLog; counted locally", "hotel", hotel)
	}
	return res[0], nil
}

// bundle returns the raw HyperLogLog of the hotel's current window (this
// region only: merged counts are never re-exported, so regions cannot loop).
func (c *counter) bundle(ctx context.Context, hotel string) ([]byte, time.Time, error) {
	now := time.Now()
	keys := c.keys.window(hotel, bucketOf(now, c.bucket), c.tiers.get(hotel).readShards())
	all := append([]string{c.keys.scratch(hotel, store.NewToken())}, keys...)
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	c.m.redisCommands.WithLabelValues("bundle").Inc()
	s, err := bundleScript.Run(ctx, c.rdb, all).Text()
	if err != nil {
		return nil, now, fmt.Errorf("bundle %s: %w", hotel, err)
	}
	return []byte(s), now, nil
}

// bundleJSON is the body of GET /v1/viewers/{hotel}/bundle.
type bundleJSON struct {
	Hotel  string    `json:"hotel"`
	Region string    `json:"region"`
	AsOf   time.Time `json:"asOf"`
	HLL    string    `json:"hll"` // base64 of Redis's HyperLogLog encoding
}

// peerSet fetches peer regions' bundles. A bundle younger than refresh is
// used as is; one younger than maxAge is used while a new one is fetched in
// the background; otherwise the fetch is waited for, at most timeout. A
// peer that times out is left out of the count and counted in a metric.
type peerSet struct {
	peers   []peerRegion
	apiKey  string
	timeout time.Duration
	refresh time.Duration
	maxAge  time.Duration
	client  *http.Client
	m       *metrics
	log     *slog.Logger

	mu    sync.Mutex
	cache map[string]peerBundle // peer name + "/" + hotel
	sf    singleflight.Group
}

type peerRegion struct{ name, base string }

type peerBundle struct {
	blob    []byte
	fetched time.Time
}

func newPeerSet(specs []string, apiKey string, timeout, refresh, maxAge time.Duration, m *metrics, log *slog.Logger) *peerSet {
	p := &peerSet{
		apiKey: apiKey, timeout: timeout, refresh: refresh, maxAge: maxAge, m: m, log: log,
		client: &http.Client{Timeout: timeout},
		cache:  map[string]peerBundle{},
	}
	for _, s := range specs {
		name, base, _ := strings.Cut(s, "=")
		p.peers = append(p.peers, peerRegion{name: name, base: strings.TrimRight(base, "/")})
	}
	return p
}

func (p *peerSet) bundles(hotel string) [][]byte {
	out := make([][]byte, len(p.peers))
	var wg sync.WaitGroup
	for i, peer := range p.peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = p.bundle(peer, hotel)
		}()
	}
	wg.Wait()
	blobs := out[:0]
	for _, b := range out {
		if len(b) > 0 {
			blobs = append(blobs, b)
		}
	}
	return blobs
}

func (p *peerSet) bundle(peer peerRegion, hotel string) []byte {
	key := peer.name + "/" + hotel
	p.mu.Lock()
	b, ok := p.cache[key]
	p.mu.Unlock()
	age := time.Since(b.fetched)
	switch {
	case ok && age < p.refresh:
		return b.blob
	case ok && age < p.maxAge:
		go p.fetchShared(peer, hotel, key)
		return b.blob
	}
	blob, _ := p.fetchShared(peer, hotel, key)
	return blob
}

func (p *peerSet) fetchShared(peer peerRegion, hotel, key string) ([]byte, error) {
	v, err, _ := p.sf.Do(key, func() (any, error) {
		blob, err := p.fetch(peer, hotel)
		if err != nil {
			return nil, err
		}
		p.mu.Lock()
		if len(p.cache) > 10000 {
			for k, b := range p.cache {
				if time.Since(b.fetched) > p.maxAge {
					delete(p.cache, k)
				}
			}
		}
		p.cache[key] = peerBundle{blob: blob, fetched: time.Now()}
		p.mu.Unlock()
		return blob, nil
	})
	if err != nil {
		return nil, err
	}
	return v.([]byte), nil
}

func (p *peerSet) fetch(peer peerRegion, hotel string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, peer.base+"/v1/viewers/"+hotel+"/bundle", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-API-Key", p.apiKey)
	resp, err := p.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			p.m.peerMerges.WithLabelValues("timeout").Inc()
		} else {
			p.m.peerMerges.WithLabelValues("error").Inc()
		}
		p.log.Debug("viewers: peer bundle fetch failed; counting without it", "peer", peer.name, "err", err)
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		p.m.peerMerges.WithLabelValues("error").Inc()
		return nil, fmt.Errorf("peer %s: status %d", peer.name, resp.StatusCode)
	}
	var body bundleJSON
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body); err != nil {
		p.m.peerMerges.WithLabelValues("error").Inc()
		return nil, fmt.Errorf("peer %s: %w", peer.name, err)
	}
	blob, err := base64.StdEncoding.DecodeString(body.HLL)
	if err != nil || len(blob) < 16 || string(blob[:4]) != "HYLL" {
		p.m.peerMerges.WithLabelValues("error").Inc()
		return nil, fmt.Errorf("peer %s: not a HyperLogLog", peer.name)
	}
	p.m.peerMerges.WithLabelValues("ok").Inc()
	return blob, nil
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
