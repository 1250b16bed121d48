package web

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/internal/promlabels"
	"github.com/presenced/presenced/web/wire"
)

// connLimit caps the open connections of the process and of each client
// address. A connection over a cap is answered with a plain 503 and
// closed at once, so the process never runs out of file descriptors (an
// accept failing with EMFILE would refuse everyone, silently) and one
// address cannot take every slot.
type connLimit struct {
	max, perIP int
	exempt     []netip.Prefix // proxies carrying many clients
	tls        bool

	mu    sync.Mutex
	total int
	byIP  map[netip.Addr]int

	open    prometheus.Gauge
	refused *prometheus.CounterVec
}

// The caps a connection can be refused by: the label values of
// presenced_http_refused_connections_total.
const (
	capProcess = "process"
	capAddress = "address"
)

// refusalBody is the one error shape, written by hand: no handler runs.
const refusalBody = `{"error":{"code":"too_many_connections","message":"%s; retry later"}}`

func newConnLimit(max, perIP int, exempt []string, tls bool, reg prometheus.Registerer) (*connLimit, error) {
	if max == 0 {
		max = defaultMaxConnections()
	}
	l := &connLimit{max: max, perIP: perIP, tls: tls, byIP: map[netip.Addr]int{},
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "presenced_http_open_connections",
			Help: "Open client connections (HTTP, WebSocket and SSE).",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_http_refused_connections_total",
			Help: "Connections refused at accept, by cap: process or address.",
		}, []string{"cap"}),
	}
	// Both caps' series exist from the start, so an alert on their rate
	// works before the first refusal.
	promlabels.Init(func(v ...string) { l.refused.WithLabelValues(v...) }, []string{capProcess, capAddress})
	for _, cidr := range exempt {
		if p, err := netip.ParsePrefix(cidr); err == nil {
			l.exempt = append(l.exempt, p.Masked())
		}
	}
	for _, c := range []prometheus.Collector{l.open, l.refused} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// defaultMaxConnections is 90 % of the open-file limit: the rest is for
// store connections, files and the listener itself.
func defaultMaxConnections() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == 0 || lim.Cur > 1<<30 {
		return 1 << 20
	}
	return int(lim.Cur) * 9 / 10
}

func (l *connLimit) wrap(ln net.Listener) net.Listener { return &limitedListener{Listener: ln, l: l} }

// take reserves a slot for addr, or names the cap that refuses it.
func (l *connLimit) take(addr netip.Addr) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total >= l.max {
		return capProcess
	}
	if l.perIP > 0 && !l.exempted(addr) {
		if l.byIP[addr] >= l.perIP {
			return capAddress
		}
		l.byIP[addr]++
	}
	l.total++
	l.open.Inc()
	return ""
}

func (l *connLimit) release(addr netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	l.open.Dec()
	if l.perIP > 0 && !l.exempted(addr) {
		if l.byIP[addr]--; l.byIP[addr] <= 0 {
			delete(l.byIP, addr)
		}
	}
}

func (l *connLimit) exempted(addr netip.Addr) bool {
	for _, p := range l.exempt {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

type limitedListener struct {
	net.Listener
	l *connLimit
}

func (ll *limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := ll.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := remoteAddr(c)
		cap := ll.l.take(addr)
		if cap == "" {
			return &limitedConn{Conn: c, l: ll.l, addr: addr}, nil
		}
		ll.l.refused.WithLabelValues(cap).Inc()
		go ll.l.refuse(c, cap)
	}
}

// refuse answers a connection over a cap and closes it. Over TLS a
// plaintext answer would be noise: the connection is just closed.
func (l *connLimit) refuse(c net.Conn, cap string) {
	defer c.Close()
	if l.tls {
		return
	}
	msg := "this server holds too many connections"
	if cap == capAddress {
		msg = "too many connections from your address"
	}
	body := fmt.Sprintf(refusalBody, msg)
	_ = c.SetDeadline(time.Now().Add(time.Second))
	_, _ = fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: %d\r\n"+
		"X-Request-Id: %s\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		1+int(wire.Jitter(2*time.Second)/time.Second), requestID(), len(body), body)
	// Half-close, then read what the client sent, so it reads the answer
	// instead of a reset.
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
		buf := make([]byte, 512)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
		}
	}
}

func remoteAddr(c net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// limitedConn gives its slot back once, however often it is closed (a
// hijacked WebSocket is closed by its own code).
type limitedConn struct {
	net.Conn
	l    *connLimit
	addr netip.Addr
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.addr) })
	return err
}

// SyscallConn reaches the socket under the slot, so a hijacked WebSocket
// can park its reader in the epoll set (socket.Conn.Serve).
func (c *limitedConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}
