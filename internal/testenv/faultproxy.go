package testenv

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

var (
	toxiOnce   sync.Once
	toxiServer *toxiproxy.ApiServer
	toxiSeq    atomic.Int64
)

// FaultProxy is a TCP proxy between a process and one of its stores, run
// in this test process (Shopify's toxiproxy): the network faults of a
// drill are toxics on it (latency, bandwidth, resets, a blackhole) or a
// cut (Partition).
type FaultProxy struct {
	t     testing.TB
	proxy *toxiproxy.Proxy
	// Addr is where clients connect instead of the store: a loopback port
	// kept across a partition and its heal.
	Addr string
	mu   sync.Mutex
	down bool
}

// NewFaultProxy starts a proxy to upstream (host:port) on a free loopback
// port, stopped at test end.
func NewFaultProxy(t testing.TB, upstream string) *FaultProxy {
	t.Helper()
	toxiOnce.Do(func() {
		// The toxics log through zerolog's global logger, at trace level.
		zerolog.SetGlobalLevel(zerolog.Disabled)
		toxiServer = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	})
	name := fmt.Sprintf("proxy-%d", toxiSeq.Add(1))
	p := toxiproxy.NewProxy(toxiServer, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("fault proxy to %s: %v", upstream, err)
	}
	t.Cleanup(p.Stop)
	return &FaultProxy{t: t, proxy: p, Addr: p.Listen}
}

// Toxic adds a toxic by toxiproxy's type name ("latency", "bandwidth",
// "reset_peer", "timeout", "slicer", "limit_data") on stream ("upstream",
// toward the store, or "downstream", toward the client) with its
// attributes as JSON, and returns its name for Remove.
func (f *FaultProxy) Toxic(kind, stream, attributes string) string {
	f.t.Helper()
	name := fmt.Sprintf("%s_%s_%d", kind, stream, toxiSeq.Add(1))
	body := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, kind, stream, attributes)
	if _, err := f.proxy.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
		f.t.Fatalf("add toxic %s: %v", body, err)
	}
	return name
}

// Remove takes a toxic away.
func (f *FaultProxy) Remove(name string) {
	f.t.Helper()
	if err := f.proxy.Toxics.RemoveToxic(Context(f.t), name); err != nil {
		f.t.Fatalf("remove toxic %s: %v", name, err)
	}
}

// Clear takes every toxic away.
func (f *FaultProxy) Clear() { f.proxy.Toxics.ResetToxics(Context(f.t)) }

// Partition cuts the link: every open connection is closed and new ones
// are refused, until Heal.
func (f *FaultProxy) Partition() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.down {
		f.proxy.Stop()
		f.down = true
	}
}

// Heal lets connections through again, on the same port.
func (f *FaultProxy) Heal() {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		if err := f.proxy.Start(); err != nil {
			f.t.Fatalf("heal fault proxy: %v", err)
		}
		f.down = false
	}
}

// Via rewrites a store URL (redis://, postgres://) to go through the proxy.
func (f *FaultProxy) Via(storeURL string) string {
	f.t.Helper()
	u, err := url.Parse(storeURL)
	if err != nil {
		f.t.Fatalf("store url: %v", err)
	}
	u.Host = f.Addr
	return u.String()
}

// HostPort is the host:port of a store URL, for NewFaultProxy.
func HostPort(t testing.TB, storeURL string) string {
	t.Helper()
	u, err := url.Parse(storeURL)
	if err != nil {
		t.Fatalf("store url: %v", err)
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		t.Fatalf("store url %s has no host:port", u.Redacted())
	}
	return u.Host
}

// Retarget points the proxy at another upstream, on the same port (a
// virtual address moved to a promoted replica): open connections are cut.
func (f *FaultProxy) Retarget(upstream string) {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.proxy.Stop()
	f.proxy.Upstream = upstream
	if err := f.proxy.Start(); err != nil {
		f.t.Fatalf("retarget fault proxy: %v", err)
	}
	f.down = false
}
