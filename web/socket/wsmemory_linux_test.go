package socket

import (
	"bytes"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/labstack/echo/v4"
	"golang.org/x/sys/unix"

	"github.com/presenced/presenced/config"
)

// BenchmarkIdleConnectionMemory opens idleConns WebSockets through Serve
// (the handshake answered through net/http, as in production), waits until
// every one is idle, and reports the Go heap, stacks and goroutines each
// one costs the process, after a collection. The clients are raw sockets
// outside the Go runtime, so all of it is the server's. "parked" is the
// production reader (no goroutine while idle), "goroutine" the same reader
// with parking off, "gorilla" gorilla's Conn read by a goroutine blocked in
// NextReader: what the hand reader saves per connection.
//
// The figures are allocation counts, not timings: they do not depend on a
// quiet machine. Run with -benchtime=1x.
func BenchmarkIdleConnectionMemory(b *testing.B) {
	const idleConns = 4000
	for _, reader := range []string{"parked", "goroutine", "gorilla"} {
		b.Run(reader, func(b *testing.B) {
			var mu sync.Mutex
			var idle []func() bool
			addr := serving(b, func(c *config.Config) {
				c.Realtime.ParkIdleReaders = reader == "parked"
				c.HTTP.MaxConnectionsPerIP = 0
				c.HTTP.MaxConnections = 3 * idleConns
			}, func(s *Server) {
				s.Echo.GET("/ws", func(c echo.Context) error {
					if reader == "gorilla" {
						return gorillaIdleReader(c, &mu, &idle)
					}
					conn, err := s.Sockets.Upgrade(c, "bench")
					if err != nil {
						return err
					}
					conn.Serve(func(msg []byte) { conn.Send(msg) }, nil)
					mu.Lock()
					idle = append(idle, func() bool {
						return conn.raw == nil || isParked(conn)
					})
					mu.Unlock()
					return nil
				})
			})
			// One connection first, so what the first one starts (the
			// sweep, the epoll set, pools) is not counted.
			warm := rawSocketClient(b, addr)
			defer unix.Close(warm)
			for i := 0; i < b.N; i++ {
				heap, stack, goroutines := idleCost(b, addr, idleConns, func() bool {
					mu.Lock()
					defer mu.Unlock()
					if len(idle) < idleConns+1 {
						return false
					}
					for _, f := range idle {
						if !f() {
							return false
						}
					}
					return true
				})
				mu.Lock()
				idle = idle[:0]
				mu.Unlock()
				b.ReportMetric(heap, "heap-B/conn")
				b.ReportMetric(stack, "stack-B/conn")
				b.ReportMetric(goroutines, "goroutines/conn")
			}
		})
	}
}

// idleCost opens n connections, waits for settled, and returns what each
// added to the live heap and the stacks, and the goroutines each started.
func idleCost(b *testing.B, addr string, n int, settled func() bool) (heap, stack, goroutines float64) {
	before := liveMemory()
	fds := make([]int, 0, n)
	defer func() {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	}()
	for range n {
		fds = append(fds, rawSocketClient(b, addr))
	}
	deadline := time.Now().Add(time.Minute)
	for !settled() {
		if time.Now().After(deadline) {
			b.Fatal("the connections did not settle")
		}
		time.Sleep(10 * time.Millisecond)
	}
	after := liveMemory()
	per := func(a, b uint64) float64 { return (float64(a) - float64(b)) / float64(n) }
	return per(after.HeapAlloc, before.HeapAlloc), per(after.StackInuse, before.StackInuse),
		per(uint64(after.goroutines), uint64(before.goroutines))
}

type memFigures struct {
	runtime.MemStats
	goroutines int
}

func liveMemory() memFigures {
	// Twice: the first collection moves pooled buffers to the victim
	// cache, the second frees them.
	runtime.GC()
	runtime.GC()
	var m memFigures
	runtime.ReadMemStats(&m.MemStats)
	m.goroutines = runtime.NumGoroutine()
	return m
}

// rawSocketClient connects to addr and completes a WebSocket handshake on
// a socket the Go runtime does not know, so the client costs the process
// no heap.
func rawSocketClient(b *testing.B, addr string) int {
	b.Helper()
	ap, err := net.ResolveTCPAddr("tcp4", addr)
	if err != nil {
		b.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	sa := &unix.SockaddrInet4{Port: ap.Port}
	copy(sa.Addr[:], ap.IP.To4())
	if err := unix.Connect(fd, sa); err != nil {
		b.Fatal(err)
	}
	head := "GET /ws HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := unix.Write(fd, []byte(head)); err != nil {
		b.Fatal(err)
	}
	var got []byte
	buf := make([]byte, 512)
	for !bytes.Contains(got, []byte("\r\n\r\n")) {
		n, err := unix.Read(fd, buf)
		if err != nil || n <= 0 {
			b.Fatalf("handshake answer: %d bytes, %v", n, err)
		}
		got = append(got, buf[:n]...)
	}
	if !bytes.HasPrefix(got, []byte("HTTP/1.1 101")) {
		b.Fatalf("handshake refused: %q", got)
	}
	return fd
}

// gorillaIdleReader serves the socket with gorilla's Conn, read by a
// goroutine, as every connection was before the hand reader.
func gorillaIdleReader(c echo.Context, mu *sync.Mutex, idle *[]func() bool) error {
	up := websocket.Upgrader{WriteBufferPool: &sync.Pool{}}
	ws, err := up.Upgrade(c.Response(), c.Request(), nil)
	if err != nil {
		return err
	}
	_ = ws.NetConn().SetDeadline(time.Time{})
	started := make(chan struct{})
	go func() {
		close(started)
		for {
			if _, _, err := ws.ReadMessage(); err != nil {
				_ = ws.Close()
				return
			}
		}
	}()
	<-started
	mu.Lock()
	*idle = append(*idle, func() bool { return true })
	mu.Unlock()
	return nil
}
