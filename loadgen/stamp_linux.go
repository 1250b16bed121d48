package loadgen

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// soTimestampNS (SO_TIMESTAMPNS) has the kernel stamp each segment with
// the wall-clock time it reached the socket; recvmsg returns the stamp of
// the last segment read. On loopback that is the moment the server's write
// handed the frame over, before this process woke up to read it.
const soTimestampNS = 35

// stampConn is a connection that keeps the kernel's receive time of the
// last data read from it, so a receipt can be measured without the load
// generator's own wake-up and reading.
type stampConn struct {
	net.Conn
	raw  syscall.RawConn
	oob  [64]byte
	last atomic.Int64 // Unix ns; 0: no stamp yet
}

// DialStamped dials like dial and turns on receive stamps; a connection
// that cannot have them is returned as it is.
func DialStamped(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		sc, ok := c.(syscall.Conn)
		if !ok {
			return c, nil
		}
		raw, err := sc.SyscallConn()
		if err != nil {
			return c, nil
		}
		var serr error
		if err := raw.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, soTimestampNS, 1)
		}); err != nil || serr != nil {
			return c, nil
		}
		return &stampConn{Conn: c, raw: raw}, nil
	}
}

func (c *stampConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n, oobn int
	var rerr error
	err := c.raw.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = syscall.Recvmsg(int(fd), p, c.oob[:], 0)
		return rerr != syscall.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, io.EOF
	}
	// No stamp (the kernel turns stamping on a moment after the first
	// socket asks for it) makes the time unknown, not the previous one.
	at, _ := parseStamp(c.oob[:oobn])
	c.last.Store(at)
	return n, nil
}

// parseStamp finds the SO_TIMESTAMPNS message in a recvmsg's control
// data.
func parseStamp(oob []byte) (int64, bool) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return 0, false
	}
	for _, m := range msgs {
		if m.Header.Level == syscall.SOL_SOCKET && m.Header.Type == soTimestampNS && len(m.Data) >= 16 {
			sec := int64(binary.NativeEndian.Uint64(m.Data))
			nsec := int64(binary.NativeEndian.Uint64(m.Data[8:]))
			return time.Unix(sec, nsec).UnixNano(), true
		}
	}
	return 0, false
}

// ArrivedAt is the kernel's receive time of the last data read from c's
// socket (0: unknown).
func ArrivedAt(c net.Conn) int64 {
	if sc, ok := c.(*stampConn); ok {
		return sc.last.Load()
	}
	return 0
}
