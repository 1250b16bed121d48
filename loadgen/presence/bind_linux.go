package presence

import "syscall"

// ipBindAddressNoPort (IP_BIND_ADDRESS_NO_PORT) defers the choice of the
// source port from bind to connect, where the whole address pair is known:
// binding a source address with port 0 otherwise reserves a port for every
// destination and gets slower as the address's ports fill up.
const ipBindAddressNoPort = 24

func bindNoPort(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, ipBindAddressNoPort, 1)
	})
	if err != nil {
		return err
	}
	return serr
}
