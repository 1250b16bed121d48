package web

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
)

// BenchmarkMiddleware is what every request pays before and after its
// handler: request id, access log, metrics, recovery, body deadline and
// limit, and the client address from X-Forwarded-For behind a trusted
// proxy. The handler itself does nothing but answer 204, as a heartbeat
// does.
func BenchmarkMiddleware(b *testing.B) {
	cfg := config.Default()
	cfg.HTTP.TrustedProxies = []string{"127.0.0.1/32"}
	s, err := NewServer(cfg, prometheus.NewRegistry(), testenv.Logger())
	if err != nil {
		b.Fatal(err)
	}
	s.Echo.POST("/v1/bench/:id/beat", func(c echo.Context) error {
		if c.RealIP() == "" {
			b.Error("no client address")
		}
		return c.NoContent(http.StatusNoContent)
	})
	req := httptest.NewRequest(http.MethodPost, "/v1/bench/h1/beat", nil)
	req.RemoteAddr = "127.0.0.1:40000"
	req.Header.Set("X-Forwarded-For", "100.64.7.9")
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		clear(w.Header())
		s.Echo.ServeHTTP(w, req)
	}
	if w.Code != http.StatusNoContent {
		b.Fatalf("status %d", w.Code)
	}
}

// BenchmarkHandshake is a WebSocket connect through Serve, client included:
// dial, handshake, the first frame (with the held answer), close. "ahead"
// is a route marked as an Endpoint (its handshake served ahead of
// net/http), "net-http" the same handler on an unmarked route.
func BenchmarkHandshake(b *testing.B) {
	cfg := config.Default()
	s, err := NewServer(cfg, prometheus.NewRegistry(), testenv.Logger())
	if err != nil {
		b.Fatal(err)
	}
	socket := func(c echo.Context) error {
		conn, err := s.Sockets.UpgradeHeld(c, "bench")
		if err != nil {
			return err
		}
		conn.Send([]byte(`{"type":"hello"}`))
		conn.Serve(func([]byte) {}, nil)
		return nil
	}
	s.Echo.GET("/ahead", socket)
	s.Echo.GET("/net-http", socket)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	defer func() { _ = s.Shutdown(context.Background()) }()
	addr := ln.Addr().String()
	buf := make([]byte, 4096)
	for _, path := range []string{"/ahead", "/net-http"} {
		head := []byte("GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
		b.Run(strings.TrimPrefix(path, "/"), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				nc, err := net.Dial("tcp", addr)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := nc.Write(head); err != nil {
					b.Fatal(err)
				}
				// The answer and the frame, then the client leaves.
				got := 0
				for !bytes.HasSuffix(buf[:got], []byte(`{"type":"hello"}`)) {
					n, err := nc.Read(buf[got:])
					if err != nil {
						b.Fatalf("after %d bytes: %v", got+n, err)
					}
					got += n
				}
				nc.Close()
			}
		})
	}
}
