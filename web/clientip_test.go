package web

import (
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
)

// The client address behind trusted proxies is what echo's
// ExtractIPFromXFFHeader says for the same request, in every case: odd
// hops, several headers, IPv6 in brackets, mapped IPv4, zones, garbage.
func TestXFFExtractorAnswersAsEcho(t *testing.T) {
	trusted := []string{"127.0.0.1/32", "10.0.0.0/8", "2001:db8::/32", "::ffff:192.168.0.0/112", "not a cidr"}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, cidr := range trusted {
		if _, n, err := net.ParseCIDR(cidr); err == nil {
			opts = append(opts, echo.TrustIPRange(n))
		}
	}
	want := echo.ExtractIPFromXFFHeader(opts...)
	got := xffExtractor(trustedPrefixes(trusted))

	hops := []string{
		"100.64.7.9", "10.1.2.3", "127.0.0.1", "192.168.1.1", "192.168.0.7", "8.8.8.8", " 8.8.4.4 ",
		"2001:db8::1", "[2001:db8::2]", "2001:0db8:0000::0003", "2a00:1450::68", "[2a00:1450:0:0::69]",
		"::ffff:10.9.9.9", "::ffff:8.8.8.8", "fe80::1%eth0", "::1", "", " ", "garbage", "1.2.3", "01.2.3.4",
		"1.2.3.4:80", "::ffff:192.168.0.1",
	}
	peers := []string{"127.0.0.1:4000", "10.0.0.1:1", "8.8.8.8:53", "[2001:db8::5]:443", "[2a00:1450::1]:80",
		"[fe80::1%eth0]:80", "[::ffff:127.0.0.1]:9", "no-port", "127.0.0.1", ""}
	check := func(peer string, headers []string) {
		req, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
		req.RemoteAddr = peer
		for _, h := range headers {
			req.Header.Add("X-Forwarded-For", h)
		}
		require.Equal(t, want(req), got(req), "peer %q, X-Forwarded-For %q", peer, headers)
	}
	for _, peer := range peers {
		check(peer, nil)
		for _, h := range hops {
			check(peer, []string{h})
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20_000; i++ {
		var headers []string
		for range rng.IntN(3) + 1 {
			parts := make([]string, rng.IntN(4)+1)
			for j := range parts {
				parts[j] = hops[rng.IntN(len(hops))]
			}
			headers = append(headers, strings.Join(parts, ","))
		}
		check(peers[rng.IntN(len(peers))], headers)
	}
}
