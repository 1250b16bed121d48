package web

import (
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/labstack/echo/v4"
)

// xffExtractor is echo's ExtractIPFromXFFHeader with only the given
// ranges trusted (no loopback, link-local or private nets by themselves),
// answering the same for every request, without its allocations: echo
// joins and splits the header and parses each hop into a net.IP on every
// request, several allocations on the path of every heartbeat.
// TestXFFExtractorAnswersAsEcho compares the two.
//
// From the peer back along X-Forwarded-For, the first address not in a
// trusted range is the client; an unparsable hop ends the walk at the
// peer, whom nothing before it can be believed about; when every hop is
// trusted, the farthest is the best guess.
func xffExtractor(trusted []netip.Prefix) echo.IPExtractor {
	isTrusted := func(a netip.Addr) bool {
		for _, p := range trusted {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	return func(req *http.Request) string {
		direct := directIP(req.RemoteAddr)
		xffs := req.Header[echo.HeaderXForwardedFor]
		if len(xffs) == 0 {
			return direct
		}
		// The peer first, then the header's hops from the nearest.
		a, ok := parseHop(direct)
		if !ok {
			return direct
		}
		if !isTrusted(a) {
			return addrString(a, direct)
		}
		var farthest string
		for i := len(xffs) - 1; i >= 0; i-- {
			rest := xffs[i]
			for {
				j := strings.LastIndexByte(rest, ',')
				hop := trimHop(rest[j+1:])
				a, ok := parseHop(hop)
				if !ok {
					return direct
				}
				if !isTrusted(a) {
					return addrString(a, hop)
				}
				farthest = hop
				if j < 0 {
					break
				}
				rest = rest[:j]
			}
		}
		return farthest
	}
}

// directIP is the peer's address as echo has it: the host of RemoteAddr
// without an IPv6 zone.
func directIP(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	if strings.Contains(host, ":") {
		host, _, _ = strings.Cut(host, "%")
	}
	if err != nil && net.ParseIP(host) == nil {
		return ""
	}
	return host
}

// trimHop strips spaces and IPv6 brackets off one hop, as echo does.
func trimHop(s string) string {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "[")
	return strings.TrimSuffix(s, "]")
}

// parseHop parses an address as net.ParseIP would: no zones, and an
// IPv4-mapped IPv6 address is its IPv4 address.
func parseHop(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// addrString is a's canonical text (net.IP's String), reusing s when it is
// that already: dotted IPv4, which ParseAddr only accepts in canonical
// form, needs no new string.
func addrString(a netip.Addr, s string) string {
	if a.Is4() && !strings.Contains(s, ":") {
		return s
	}
	return a.String()
}

// trustedPrefixes parses the trusted proxy ranges; entries that do not
// parse are skipped, as before (config validation refuses them first).
func trustedPrefixes(cidrs []string) []netip.Prefix {
	var out []netip.Prefix
	for _, cidr := range cidrs {
		_, n, err := net.ParseCIDR(cidr)
		if err != nil {
			continue
		}
		addr, _ := netip.AddrFromSlice(n.IP)
		ones, _ := n.Mask.Size()
		if addr.Is4In6() && ones >= 96 {
			addr, ones = addr.Unmap(), ones-96
		}
		out = append(out, netip.PrefixFrom(addr.Unmap(), ones).Masked())
	}
	return out
}
