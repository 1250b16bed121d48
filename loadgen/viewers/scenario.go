// Package viewers is `presenced loadgen viewers`: simulated viewers heartbeating
// hotel pages over HTTP while readers poll counts, on the viewers module's
// wire protocol only.
package viewers

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"

	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/loadgen"
	"github.com/presenced/presenced/viewers"
)

// Scenario is the `presenced loadgen viewers` scenario: N simulated viewers
// spread over M hotels with a Zipf skew, each heartbeating every interval
// with its own session cookie, while readers poll counts. It reports
// heartbeat throughput and latency, count latency, count accuracy against
// the true number of viewers, and the Redis commands the module sent.
type Scenario struct {
	viewers    int
	hotels     int
	skew       float64
	interval   time.Duration
	countRate  float64
	bucket     time.Duration
	forwarded  bool
	perPrefix  int
	redisURL   string
	checkTop   int
	secrets    loadgen.Secrets
	hotelNames []string
	// accepted counts 204s, firsts the viewers with at least one, issued
	// the session cookies the server set.
	accepted, firsts, issued atomic.Int64
}

// New returns the viewers load scenario.
func New() *Scenario { return &Scenario{} }

func (l *Scenario) Name() string { return "viewers" }

func (l *Scenario) Describe() string {
	return "simulated viewers heartbeating across Zipf-skewed hotels; throughput, count p99, accuracy, Redis commands"
}

func (l *Scenario) Flags(fs *pflag.FlagSet) {
	fs.IntVar(&l.viewers, "viewers", 20000, "simulated viewers (sessions)")
	fs.IntVar(&l.hotels, "hotels", 1000, "hotels")
	fs.Float64Var(&l.skew, "skew", 1.1, "Zipf exponent of viewers per hotel (>1)")
	fs.DurationVar(&l.interval, "interval", 15*time.Second, "heartbeat interval per viewer (0: as fast as possible; --rate overrides)")
	fs.Float64Var(&l.countRate, "count-rate", 200, "count reads per second")
	fs.DurationVar(&l.bucket, "bucket", 30*time.Second, "the server's viewers.bucket, for the accuracy check")
	fs.BoolVar(&l.forwarded, "forwarded", true, "send X-Forwarded-For from synthetic networks (the server must trust 127.0.0.1/32 in http.trusted_proxies)")
	fs.IntVar(&l.perPrefix, "per-prefix", 16, "viewers sharing one synthetic /24")
	fs.StringVar(&l.redisURL, "redis-url", "", "the server's Redis, to read INFO commandstats (optional)")
	fs.IntVar(&l.checkTop, "check-hotels", 20, "busiest hotels whose count is checked against the truth")
	l.secrets.AddFlags(fs)
}

type simViewer struct {
	path   string // the whole URL
	uri    string // its path, for the wire client
	hotel  int
	ip     string
	cookie atomic.Pointer[string]
	lastOK atomic.Int64 // unix nanoseconds of the last 204
}

func (l *Scenario) Run(ctx context.Context, r *loadgen.Runner) error {
	if l.viewers <= 0 || l.hotels <= 0 || l.skew <= 1 {
		return fmt.Errorf("--viewers and --hotels must be positive and --skew above 1")
	}
	base := strings.TrimRight(r.Options.Target, "/")
	rng := rand.New(rand.NewSource(1))
	zipf := rand.NewZipf(rng, l.skew, 1, uint64(l.hotels-1))
	run := strconv.FormatInt(time.Now().Unix()%100000, 36)
	l.hotelNames = make([]string, l.hotels)
	for i := range l.hotelNames {
		l.hotelNames[i] = "lg-" + run + "-" + strconv.Itoa(i)
	}
	vs := make([]*simViewer, l.viewers)
	for i := range vs {
		h := int(zipf.Uint64())
		p := i / max(1, l.perPrefix)
		vs[i] = &simViewer{
			hotel: h,
			uri:   "/v1/viewers/" + l.hotelNames[h] + "/heartbeat",
			// Synthetic sources in 100.64.0.0/10, only ever written into a
			// header: each run of per-prefix viewers shares one /24.
			ip: fmt.Sprintf("100.%d.%d.%d", 64+p/256%64, p%256, 1+i%max(1, l.perPrefix)%254),
		}
		vs[i].path = base + vs[i].uri
	}
	if err := l.registerHotels(ctx, r, base); err != nil {
		return err
	}
	if r.Options.Rate == 0 && l.interval > 0 {
		r.Options.Rate = float64(l.viewers) / l.interval.Seconds()
	}
	before := l.scrape(ctx, r, base)
	redisBefore := l.redisCalls(ctx)
	// Every viewer's first heartbeat signs a new cookie; once all have had
	// one, the run is in its steady state.
	markStart := l.mark(before)
	steady := make(chan cpuMark, 1)

	// Count readers run beside the heartbeats.
	var countHist loadgen.Histogram
	var countMu sync.Mutex
	var countErrs atomic.Int64
	cctx, stopCounts := context.WithCancel(ctx)
	var cwg sync.WaitGroup
	cwg.Add(1)
	go func() {
		defer cwg.Done()
		l.watchSteady(cctx, r, base, len(vs), steady)
	}()
	if l.countRate > 0 {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			l.readCounts(cctx, r, base, &countHist, &countMu, &countErrs)
		}()
	}

	r.Label("heartbeats")
	r.Hint("http 429", "either one viewer sent more than viewers.session_rate heartbeats a second (10 by default: add --viewers or set --rate), or the server rate-limits heartbeats per /24 network (viewers.prefix_rate) and counts all of this loadgen's viewers as one network unless it trusts their X-Forwarded-For: set http.trusted_proxies to 127.0.0.1/32 (PRESENCED_HTTP_TRUSTED_PROXIES=127.0.0.1/32; a development server without redis.url and postgres.url trusts loopback already), or viewers.prefix_rate: 0")
	wi := newWire(r.Options.Target, r.Options.Concurrency)
	start := time.Now()
	var next atomic.Int64
	r.Loop(ctx, func(ctx context.Context, _ int) error {
		v := vs[next.Add(1)%int64(len(vs))]
		return l.heartbeat(ctx, r.Client, wi, v)
	})
	elapsed := time.Since(start)
	if wi != nil {
		wi.closeAll()
	}
	stopCounts()
	cwg.Wait()

	after := l.scrape(ctx, r, base)
	redisAfter := l.redisCalls(ctx)
	l.cpuFigures(r, markStart, l.mark(after), steady)
	// A cookie per viewer: more means sessions were not kept (a cookie not
	// sent back, or refused), and the count would be inflated.
	r.AddFigure("session cookies set", "%d for %d viewers", l.issued.Load(), len(vs))
	countMu.Lock()
	r.AddFigure("count reads", "%d (%d errors)", countHist.Count(), countErrs.Load())
	r.AddFigure("count p50 / p99", "%s / %s", countHist.Quantile(0.5).Round(time.Microsecond), countHist.Quantile(0.99).Round(time.Microsecond))
	countMu.Unlock()
	secs := elapsed.Seconds()
	if before != nil && after != nil {
		writes := after["presenced_viewers_hll_writes_total"] - before["presenced_viewers_hll_writes_total"]
		cmds := after["presenced_viewers_redis_commands_total"] - before["presenced_viewers_redis_commands_total"]
		acc := after[`presenced_viewers_heartbeats_total{result="accepted"}`] - before[`presenced_viewers_heartbeats_total{result="accepted"}`]
		r.AddFigure("HLL writes/s (batched PFADD)", "%.1f", writes/secs)
		if writes > 0 {
			r.AddFigure("heartbeats per HLL write", "%.1f", acc/writes)
		}
		r.AddFigure("viewers Redis commands/s", "%.1f", cmds/secs)
	} else {
		r.AddFigure("server metrics", "unavailable (GET /metrics failed)")
	}
	if redisBefore >= 0 && redisAfter >= 0 {
		r.AddFigure("Redis commands/s (INFO commandstats)", "%.1f", float64(redisAfter-redisBefore)/secs)
	}
	l.checkAccuracy(ctx, r, base, vs)
	return nil
}

// heartbeat sends v's heartbeat with the wire client (or through net/http
// for an https target) and keeps the session cookie it is given.
func (l *Scenario) heartbeat(ctx context.Context, c *http.Client, wi *wire, v *simViewer) error {
	var cookie, forwarded string
	if ck := v.cookie.Load(); ck != nil {
		cookie = *ck
	}
	if l.forwarded {
		forwarded = v.ip
	}
	var status int
	var setCookies []string
	var err error
	if wi != nil {
		status, setCookies, err = wi.post(ctx, v.uri, cookie, forwarded)
	} else {
		status, setCookies, err = l.postHTTP(ctx, c, v.path, cookie, forwarded)
	}
	if err != nil {
		return err
	}
	for _, sc := range setCookies {
		if val, ok := strings.CutPrefix(sc, "pd_vs="); ok {
			val, _, _ = strings.Cut(val, ";")
			val = "pd_vs=" + val // sent as it is
			v.cookie.Store(&val)
			l.issued.Add(1)
		}
	}
	if status != http.StatusNoContent {
		return loadgen.StatusError(status)
	}
	l.accepted.Add(1)
	if v.lastOK.Swap(time.Now().UnixNano()) == 0 {
		l.firsts.Add(1)
	}
	return nil
}

// postHTTP is a heartbeat through net/http's client.
func (l *Scenario) postHTTP(ctx context.Context, c *http.Client, url, cookie, forwarded string) (int, []string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return 0, nil, err
	}
	if cookie != "" {
		req.Header.Set("Cookie", cookie)
	}
	if forwarded != "" {
		req.Header.Set("X-Forwarded-For", forwarded)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Values("Set-Cookie"), nil
}

func (l *Scenario) readCounts(ctx context.Context, r *loadgen.Runner, base string, h *loadgen.Histogram, mu *sync.Mutex, errs *atomic.Int64) {
	rng := rand.New(rand.NewSource(2))
	zipf := rand.NewZipf(rng, l.skew, 1, uint64(l.hotels-1))
	t := time.NewTicker(time.Duration(float64(time.Second) / l.countRate))
	defer t.Stop()
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		hotel := l.hotelNames[zipf.Uint64()]
		select {
		case sem <- struct{}{}:
		default:
			errs.Add(1) // the server is too slow to keep up with the read rate
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			t0 := time.Now()
			_, err := l.getCount(ctx, r.Client, base, hotel)
			d := time.Since(t0)
			if err != nil {
				if ctx.Err() == nil {
					errs.Add(1)
				}
				return
			}
			mu.Lock()
			h.Record(d)
			mu.Unlock()
		}()
	}
}

func (l *Scenario) getCount(ctx context.Context, c *http.Client, base, hotel string) (viewers.Count, error) {
	var out viewers.Count
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/viewers/"+hotel+"/count", nil)
	if err != nil {
		return out, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return out, loadgen.StatusError(resp.StatusCode)
	}
	return out, json.NewDecoder(resp.Body).Decode(&out)
}

// checkAccuracy compares the busiest hotels' counts with the viewers that
// are truly in their window: those with an accepted heartbeat since the
// start of the previous bucket.
func (l *Scenario) checkAccuracy(ctx context.Context, r *loadgen.Runner, base string, vs []*simViewer) {
	// Let the last flush land and the count cache expire.
	time.Sleep(2500 * time.Millisecond)
	from := (time.Now().UnixNano()/int64(l.bucket) - 1) * int64(l.bucket)
	truth := make([]int, l.hotels)
	for _, v := range vs {
		if v.lastOK.Load() >= from {
			truth[v.hotel]++
		}
	}
	order := make([]int, l.hotels)
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return truth[order[a]] > truth[order[b]] })
	var sumErr, maxErr float64
	checked, total := 0, 0
	for _, h := range order[:min(l.checkTop, len(order))] {
		if truth[h] == 0 {
			break
		}
		c, err := l.getCount(ctx, r.Client, base, l.hotelNames[h])
		if err != nil {
			continue
		}
		e := 100 * math.Abs(float64(c.Count)-float64(truth[h])) / float64(truth[h])
		sumErr += e
		maxErr = max(maxErr, e)
		checked++
		total += truth[h]
	}
	if checked == 0 {
		r.AddFigure("count accuracy", "no hotel to check")
		return
	}
	r.AddFigure("count accuracy", "%d busiest hotels (%d viewers, top %d): mean error %.2f%%, max %.2f%%",
		checked, total, truth[order[0]], sumErr/float64(checked), maxErr)
}

// scrape reads the module's counters from the target's /metrics, summed
// over labels except the heartbeat results, and the server's CPU seconds.
func (l *Scenario) scrape(ctx context.Context, r *loadgen.Runner, base string) map[string]float64 {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil
	}
	resp, err := r.Client.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "presenced_viewers_") && !strings.HasPrefix(line, serverCPUMetric+" ") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		if strings.HasPrefix(name, "presenced_viewers_heartbeats_total") {
			out[name] += f
			continue
		}
		metric, _, _ := strings.Cut(name, "{")
		out[metric] += f
	}
	return out
}

// redisCalls sums the calls of INFO commandstats, or -1 without --redis-url.
func (l *Scenario) redisCalls(ctx context.Context) int64 {
	if l.redisURL == "" {
		return -1
	}
	opt, err := redis.ParseURL(l.redisURL)
	if err != nil {
		return -1
	}
	c := redis.NewClient(opt)
	defer c.Close()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return -1
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		if i := strings.Index(line, "calls="); i >= 0 {
			v := line[i+6:]
			v, _, _ = strings.Cut(v, ",")
			n, _ := strconv.ParseInt(v, 10, 64)
			total += n
		}
	}
	return total
}

// registerHotels creates the run's hotels through the admin API (viewers
// counts only hotels that exist), one room type and one night each, and
// waits until the server's hotel registry knows every one.
func (l *Scenario) registerHotels(ctx context.Context, r *loadgen.Runner, base string) error {
	if err := l.secrets.Resolve(); err != nil {
		return err
	}
	start := time.Now()
	sem := make(chan struct{}, 16)
	errs := make(chan error, len(l.hotelNames))
	var wg sync.WaitGroup
	for _, id := range l.hotelNames {
		wg.Add(1)
		sem <- struct{}{}
		go func(id string) {
			defer wg.Done()
			defer func() { <-sem }()
			spec := fmt.Sprintf(`{"id":%q,"city":"loadgen-viewers","timezone":"UTC","currency":"EUR","openNights":1,`+
				`"roomTypes":[{"id":"room","capacity":2,"rooms":1,"basePrice":1}]}`, id)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/admin/hotels", strings.NewReader(spec))
			if err != nil {
				errs <- err
				return
			}
			req.Header.Set(auth.APIKeyHeader, l.secrets.APIKey)
			req.Header.Set("Content-Type", "application/json")
			resp, err := r.Client.Do(req)
			if err != nil {
				errs <- err
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusConflict {
				errs <- fmt.Errorf("create hotel %s: %d", id, resp.StatusCode)
			}
		}(id)
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	// Every hotel, not only the last: registrations commit in any order,
	// and a refresh may have seen the last before the others.
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range l.hotelNames {
		for {
			if _, err := l.getCount(ctx, r.Client, base, id); err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("hotel %s not known to the count plane after 30s: is a booking plane running?", id)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	r.AddFigure("hotels", "%d registered in %s", len(l.hotelNames), time.Since(start).Round(time.Millisecond))
	return nil
}

// mark is the run now, with the server's CPU from metrics (a scrape; nil
// when it failed).
func (l *Scenario) mark(metrics map[string]float64) cpuMark {
	m := cpuMark{at: time.Now(), server: -1, self: selfCPU(), accepted: l.accepted.Load()}
	if v, ok := metrics[serverCPUMetric]; ok {
		m.server = v
	}
	return m
}

// watchSteady marks the moment every viewer has had its first heartbeat
// accepted (all cookies issued), if that happens within the load window.
func (l *Scenario) watchSteady(ctx context.Context, r *loadgen.Runner, base string, viewers int, out chan<- cpuMark) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if l.firsts.Load() >= int64(viewers) {
			out <- l.mark(l.scrape(ctx, r, base))
			return
		}
	}
}

// cpuFigures reports heartbeats per server core-second over the load
// window and over its steady state, with the CPU both processes used.
func (l *Scenario) cpuFigures(r *loadgen.Runner, start, end cpuMark, steady <-chan cpuMark) {
	r.AddFigure("CPU in the load window", "%s", cpuShares(start, end))
	window, ok := perCore(start, end)
	if !ok {
		r.AddFigure("heartbeats per server core-second", "n/a (no %s on the server's /metrics)", serverCPUMetric)
		return
	}
	r.AddFigure("heartbeats per server core-second", "%.0f over the load window", window)
	select {
	case s := <-steady:
		if v, ok := perCore(s, end); ok && end.at.Sub(s.at) > time.Second {
			r.AddFigure("  in steady state", "%.0f over the last %.1f s, after every viewer's first heartbeat (%s)",
				v, end.at.Sub(s.at).Seconds(), cpuShares(s, end))
			return
		}
	default:
	}
	r.AddFigure("  in steady state", "n/a: not every viewer had a heartbeat accepted a second before the load window ended")
}
