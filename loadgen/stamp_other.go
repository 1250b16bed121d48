//go:build !linux

package loadgen

import (
	"context"
	"net"
)

func DialStamped(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return dial
}

func ArrivedAt(net.Conn) int64 { return 0 }
