package testenv

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	stripeOnce sync.Once
	stripeURL  string
	stripeErr  error
)

// StripeMockVersion is the stripe-mock the tests are written against.
const StripeMockVersion = "v0.203.0"

const installStripeMock = "install stripe-mock (go install github.com/stripe/stripe-mock@" + StripeMockVersion +
	") or set PRESENCED_TEST_STRIPE_MOCK_URL"

// StripeMockURL is the base URL of this test binary's stripe-mock, Stripe's
// official mock of its API, started like redis-server on free ports.
func StripeMockURL(t testing.TB) string {
	t.Helper()
	stripeOnce.Do(func() {
		if u := os.Getenv("PRESENCED_TEST_STRIPE_MOCK_URL"); u != "" {
			stripeURL = u
			return
		}
		stripeURL, stripeErr = startStripeMock()
	})
	if stripeErr != nil {
		t.Fatalf("stripe-mock: %v", stripeErr)
	}
	return stripeURL
}

// stripeMockBinary finds stripe-mock on PATH or where go install puts it.
func stripeMockBinary() (string, error) {
	p, err := findTool("stripe-mock")
	if err != nil {
		return "", fmt.Errorf("tests need stripe-mock: %s", installStripeMock)
	}
	return p, nil
}

func startStripeMock() (string, error) {
	bin, err := stripeMockBinary()
	if err != nil {
		return "", err
	}
	// Both listeners on free loopback ports: stripe-mock's default HTTPS
	// port would collide between test binaries running at once.
	cmd := exec.Command(bin, "-http-addr", "127.0.0.1:", "-https-addr", "127.0.0.1:")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s: %w", bin, err)
	}
	atExit(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "Listening for HTTP at address: "); ok && !sent {
				found <- "http://" + strings.TrimSpace(addr)
				sent = true
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	select {
	case u := <-found:
		return u, nil
	case <-ctx.Done():
		return "", fmt.Errorf("%s did not say where it listens within 30s", bin)
	}
}
