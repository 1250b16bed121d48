package presence

import (
	"fmt"
	"net"
	"net/url"
	"syscall"
)

func checkGateway(g string, allowRemote bool) error {
	u, err := url.Parse(g)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("--gateways: %q is not an http(s) URL", g)
	}
	if !allowRemote && !isLoopbackURL(g) {
		return fmt.Errorf("--gateways: %s is not a loopback address; pass --allow-remote to load another machine", u.Hostname())
	}
	return nil
}

func isLoopbackURL(g string) bool {
	u, err := url.Parse(g)
	if err != nil {
		return false
	}
	ips, err := net.LookupIP(u.Hostname())
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return false
		}
	}
	return true
}

// raiseFileLimit lifts the soft open-files limit to the hard one.
func raiseFileLimit() {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
}
