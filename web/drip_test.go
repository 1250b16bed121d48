package web

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
)

// dripEnv makes the test binary a dripper: "addr|source ip|connections|seconds".
const dripEnv = "PRESENCED_DRIPPER"

func init() {
	if spec := os.Getenv(dripEnv); spec != "" {
		runDripper(spec)
		os.Exit(0)
	}
}

// runDripper holds n connections from one source address, each sending a
// request body one byte a second, reopening any the server closes.
func runDripper(spec string) {
	parts := strings.Split(spec, "|")
	n, _ := strconv.Atoi(parts[2])
	secs, _ := strconv.Atoi(parts[3])
	end := time.Now().Add(time.Duration(secs) * time.Second)
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(parts[1])}, Timeout: 5 * time.Second}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				c, err := d.Dial("tcp", parts[0])
				if err != nil {
					time.Sleep(200 * time.Millisecond)
					continue
				}
				_, err = fmt.Fprintf(c, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{")
				for err == nil && time.Now().Before(end) {
					time.Sleep(time.Second)
					_, err = c.Write([]byte(" "))
				}
				_ = c.Close()
			}
		}()
	}
	wg.Wait()
}

// TestDrippingConnectionsDoNotStopANormalClient: thousands of connections
// dripping request bodies from several addresses (in processes of their
// own, each under the machine's open-file limit) do not keep a normal
// client from being served: bodies are cut at http.body_read_timeout, one
// address holds at most http.max_connections_per_ip, the process at most
// http.max_connections, and the rest are refused at once. The default run
// is small; PRESENCED_DRIP_CONNECTIONS=19000 runs the full demonstration.
func TestDrippingConnectionsDoNotStopANormalClient(t *testing.T) {
	t.Parallel()
	total, secs := 400, 8
	if v, err := strconv.Atoi(os.Getenv("PRESENCED_DRIP_CONNECTIONS")); err == nil && v > 0 {
		total, secs = v, 40
	}
	const sources = 8 // 127.0.0.2 … 127.0.0.9
	perSource := total / sources
	addr := serving(t, func(c *config.Config) {
		c.HTTP.BodyReadTimeout = 2 * time.Second
		c.HTTP.MaxConnectionsPerIP = max(perSource*8/10, 10) // each dripping address is over its cap
	}, func(s *Server) {
		s.Echo.POST("/echo", func(c echo.Context) error {
			b, err := io.ReadAll(c.Request().Body)
			if err != nil {
				return err
			}
			return c.Blob(http.StatusOK, "application/json", b)
		})
	})
	var kids []*exec.Cmd
	for i := 0; i < sources; i++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|127.0.0.%d|%d|%d", dripEnv, addr, i+2, perSource, secs))
		require.NoError(t, cmd.Start())
		kids = append(kids, cmd)
	}
	t.Cleanup(func() {
		for _, k := range kids {
			_ = k.Process.Kill()
			_ = k.Wait()
		}
	})
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var served, failed atomic.Int64
	var lastErr atomic.Value
	deadline := time.Now().Add(time.Duration(secs-2) * time.Second)
	time.Sleep(time.Duration(secs/4) * time.Second) // let the drippers fill their slots
	for time.Now().Before(deadline) {
		resp, err := client.Post("http://"+addr+"/echo", "application/json", strings.NewReader(`{"ok":true}`))
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if err == nil && resp.StatusCode == http.StatusOK {
			served.Add(1)
		} else {
			failed.Add(1)
			lastErr.Store(fmt.Sprint(err, resp))
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("%d dripping connections from %d addresses: normal client served %d, failed %d", perSource*sources, sources, served.Load(), failed.Load())
	require.Zero(t, failed.Load(), "the normal client was always served: %v", lastErr.Load())
	require.Positive(t, served.Load())
}
