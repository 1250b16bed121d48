package store

import (
	"context"
	"net"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// A port another process takes between the check and the server's bind is
// not an error the caller sees: the start moves to another port.
func TestRedisServerRetriesATakenPort(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("this test needs redis-server: %v", err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	var picked []int
	pick := func() (int, error) {
		if len(picked) == 0 {
			picked = append(picked, taken.Addr().(*net.TCPAddr).Port)
			return picked[0], nil
		}
		p, err := FreePort()
		picked = append(picked, p)
		return p, err
	}
	srv, err := startRedisServer(context.Background(), RedisServerOptions{}, pick)
	require.NoError(t, err)
	defer srv.Stop()
	require.Len(t, picked, 2, "one retry after the bind failure")
}

// A port whose bus port (port + 10000) is taken is passed over.
func TestFreePortSkipsATakenBusPort(t *testing.T) {
	t.Parallel()
	bus, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer bus.Close()
	busy := bus.Addr().(*net.TCPAddr).Port - clusterBus
	calls := 0
	p, err := freePortOf(func() int {
		calls++
		if calls == 1 {
			return busy
		}
		return portLow + calls
	})
	require.NoError(t, err)
	require.NotEqual(t, busy, p, "%d was passed over: its bus port is taken", busy)
	require.GreaterOrEqual(t, calls, 2)
}

func TestLogTailKeepsTheLastLines(t *testing.T) {
	t.Parallel()
	l := newLogTail(2)
	_, _ = l.Write([]byte("one\ntw"))
	_, _ = l.Write([]byte("o\nthree\nfour"))
	require.Equal(t, "two | three | four", l.String(), "the last two lines and the unfinished one")
	require.Equal(t, "(nothing)", newLogTail(3).String())
}
