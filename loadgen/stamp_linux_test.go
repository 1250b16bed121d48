package loadgen

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A stamped connection reads what was written and keeps the kernel's
// receive time of it: after the write began, before the read returned.
func TestStampedConnectionKeepsTheKernelReceiveTime(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	var d net.Dialer
	c, err := DialStamped(d.DialContext)(context.Background(), "tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	require.IsType(t, &stampConn{}, c)
	srv := <-accepted
	require.NotNil(t, srv)
	defer srv.Close()
	require.Zero(t, ArrivedAt(c), "nothing read yet")
	buf := make([]byte, 64)
	// The kernel turns stamping on shortly after the first socket asks:
	// until then reads carry no stamp, and the time is unknown (0).
	for deadline := time.Now().Add(5 * time.Second); ArrivedAt(c) == 0; time.Sleep(10 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "receive stamps never came")
		_, err := srv.Write([]byte("warm"))
		require.NoError(t, err)
		_, err = c.Read(buf)
		require.NoError(t, err)
	}

	for _, msg := range []string{"first frame", "second"} {
		before := time.Now().UnixNano()
		_, err = srv.Write([]byte(msg))
		require.NoError(t, err)
		time.Sleep(5 * time.Millisecond) // the receipt is read well after it arrived
		require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
		n, err := c.Read(buf)
		after := time.Now().UnixNano()
		require.NoError(t, err)
		require.Equal(t, msg, string(buf[:n]))
		at := ArrivedAt(c)
		require.GreaterOrEqual(t, at, before, msg)
		require.Less(t, at, after-int64(4*time.Millisecond), "%s: the stamp is the arrival, not the read", msg)
	}

	require.NoError(t, srv.Close())
	_, err = c.Read(make([]byte, 8))
	require.ErrorIs(t, err, io.EOF)
}

// A read deadline still ends a read that waits.
func TestStampedConnectionHonoursReadDeadlines(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			time.Sleep(time.Second)
			c.Close()
		}
	}()
	var d net.Dialer
	c, err := DialStamped(d.DialContext)(context.Background(), "tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Millisecond)))
	_, err = c.Read(make([]byte, 8))
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout())
}
