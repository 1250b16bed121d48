package socket

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
)

// Frames far larger than the socket's buffer go out in part without
// waiting, then the rest with a deadline; a reader that comes late gets
// every frame whole and in order. A frame sent after that deadline passed
// still goes out: the slow path leaves no deadline behind.
func TestFramesBiggerThanTheSocketBufferArriveWhole(t *testing.T) {
	eachReader(t, func(t *testing.T, park bool) {
		// Each frame that waits for room may wait this long: the reader
		// starts 300 ms late and must then drain 16 MiB, which on a busy
		// machine under -race took longer than a second (the server, rightly,
		// dropped the connection).
		const timeout = 3 * time.Second
		b := setupServe(t, parking(park, func(c *config.Config) {
			c.Realtime.WriteTimeout = timeout
		}))
		cl, conn := b.open(t)
		frames := make([][]byte, 32)
		for i := range frames {
			frames[i] = bytes.Repeat([]byte{byte('a' + i)}, 512<<10)
			require.True(t, conn.Send(frames[i]))
		}
		// Let the socket fill before reading anything.
		time.Sleep(300 * time.Millisecond)
		for i, want := range frames {
			op, got := cl.next(false)
			require.Equal(t, byte(opText), op)
			require.True(t, bytes.Equal(want, got), "frame %d arrived damaged (%d bytes)", i, len(got))
		}
		time.Sleep(timeout + time.Second)
		for i := range 3 {
			msg := fmt.Sprintf("after the deadline %d", i)
			require.True(t, conn.Send([]byte(msg)))
			cl.expectText(msg)
		}
	})
}

// A peer that never reads is dropped once a frame waited write_timeout for
// room in its socket.
func TestPeerThatStopsReadingIsDroppedAfterTheWriteTimeout(t *testing.T) {
	eachReader(t, func(t *testing.T, park bool) {
		b := setupServe(t, parking(park, func(c *config.Config) {
			c.Realtime.WriteTimeout = 200 * time.Millisecond
		}))
		_, conn := b.open(t)
		big := bytes.Repeat([]byte("y"), 1<<20)
		for i := 0; i < 32 && conn.Send(big); i++ {
		}
		select {
		case <-conn.Done():
		case <-time.After(20 * time.Second):
			t.Fatal("a peer that reads nothing was not dropped")
		}
		require.Equal(t, 1.0, testutil.ToFloat64(b.srv.Sockets.drops.WithLabelValues("slow_consumer")), "counted as a slow consumer")
		require.Zero(t, testutil.ToFloat64(b.srv.Sockets.drops.WithLabelValues("write_failed")))
	})
}
