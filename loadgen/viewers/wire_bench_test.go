package viewers

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/http"
	"testing"
	"time"
)

// cannedServer answers every request on a connection with the same 204,
// reading only up to each request's blank line: a server that costs next
// to nothing, so a benchmark against it times the client.
func cannedServer(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	answer := []byte("HTTP/1.1 204 No Content\r\nX-Request-Id: 0123456789abcdef0123456789abcdef\r\nDate: Tue, 01 Dec 2026 20:00:00 GMT\r\n\r\n")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadSlice('\n')
					if err != nil {
						return
					}
					if bytes.Equal(line, []byte("\r\n")) {
						if _, err := c.Write(answer); err != nil {
							return
						}
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

const benchCookie = "pd_vs=v1.k1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

// BenchmarkHeartbeatWire is one heartbeat from the wire client, as a
// loadgen worker sends it (with its per-operation timeout context), to a
// server that costs next to nothing. Run at -cpu 1: ns/op is about the
// generator's CPU per heartbeat.
func BenchmarkHeartbeatWire(b *testing.B) {
	wi := newWire(cannedServer(b), 1)
	b.Cleanup(wi.closeAll)
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		status, _, err := wi.post(ctx, "/v1/viewers/lg-abc-17/heartbeat", benchCookie, "100.64.3.7")
		cancel()
		if err != nil || status != http.StatusNoContent {
			b.Fatal(status, err)
		}
	}
}

// BenchmarkHeartbeatNetHTTP is the same heartbeat through net/http's
// client, as the loadgen sent it before the wire client.
func BenchmarkHeartbeatNetHTTP(b *testing.B) {
	url := cannedServer(b) + "/v1/viewers/lg-abc-17/heartbeat"
	tr := http.DefaultTransport.(*http.Transport).Clone()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	b.Cleanup(tr.CloseIdleConnections)
	l := &Scenario{}
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		status, _, err := l.postHTTP(ctx, c, url, benchCookie, "100.64.3.7")
		cancel()
		if err != nil || status != http.StatusNoContent {
			b.Fatal(status, err)
		}
	}
}
