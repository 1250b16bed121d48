package presence_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/app"
	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
)

// childEnv carries a JSON config: the test binary then runs one presenced
// process instead of the tests, so a test can kill a real gateway.
const childEnv = "PRESENCE_TEST_CHILD_CONFIG"

func runChild() {
	var cfg config.Config
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "child config:", err)
		os.Exit(2)
	}
	a, err := app.New(cfg, testenv.Logger())
	if err == nil {
		err = a.Start(context.Background())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child start:", err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.Exit(2)
	}
	fmt.Println("LISTEN " + ln.Addr().String())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := a.Run(ctx, ln); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

// childServer starts cfg in a separate process and returns its base URL
// and the process, killed at test end if still running.
func childServer(t *testing.T, cfg config.Config) (string, *os.Process) {
	t.Helper()
	raw, err := json.Marshal(cfg)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "LISTEN "); ok {
				lines <- addr
			}
		}
	}()
	select {
	case addr := <-lines:
		return "http://" + addr, cmd.Process
	case <-time.After(30 * time.Second):
		t.Fatal("child server did not start")
		return "", nil
	}
}
