package store

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
)

// Private servers (redis-server, PostgreSQL, a Redis Cluster node) get ports
// from below the kernels' ephemeral ranges (Linux 32768–60999, macOS
// 49152–65535). A port from the ephemeral range is a poor choice twice over:
// any outgoing connection of any process may take it between our check and
// the server's bind, and Redis refuses cluster ports above 55535 because a
// node's cluster bus listens on port + 10000. Ports in [portLow, portHigh]
// keep both the port and its bus port below 32768.
const (
	portLow     = 10000
	portHigh    = 22767
	clusterBus  = 10000 // a Redis Cluster node's bus port is its port + 10000
	portChoices = 200
)

// FreePort returns a loopback TCP port that is free now and whose Redis
// Cluster bus port (port + 10000) is free as well, so every private server
// can use it, cluster nodes included. Another process may still take it
// before the server binds: callers that chose the port retry on a bind
// failure.
func FreePort() (int, error) {
	return freePortOf(func() int { return portLow + rand.IntN(portHigh-portLow+1) })
}

// freePortOf returns the first of candidate's ports that is free together
// with its bus port.
func freePortOf(candidate func() int) (int, error) {
	for i := 0; i < portChoices; i++ {
		p := candidate()
		if portFree(p) && portFree(p+clusterBus) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("find a free port: none of %d tried in %d-%d (with port+%d) was free", portChoices, portLow, portHigh, clusterBus)
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}
