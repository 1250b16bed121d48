package apptest

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

// childEnv carries a JSON config to a test binary started by Child: it then
// runs one presenced process instead of the tests.
const childEnv = "PRESENCED_TEST_CHILD_CONFIG"

// childListenerFD is the descriptor of the listener Child opened for the
// process (the first of exec.Cmd.ExtraFiles).
const childListenerFD = 3

// RunChildIfAsked runs presenced instead of the tests when this test binary
// was started by Child, and then does not return. Call it first in TestMain.
func RunChildIfAsked() {
	raw := os.Getenv(childEnv)
	if raw == "" {
		return
	}
	var cfg config.Config
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
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
	ln, err := net.FileListener(os.NewFile(childListenerFD, "listener"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child listener:", err)
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

// Child starts cfg in a process of its own, this test binary run again, so
// a test can kill it as a crash would (SIGKILL). It returns the base URL
// and the command; the process is killed at test end if still running.
// The test binary's TestMain must call RunChildIfAsked.
//
// The listener is opened here and handed down, so the process's
// http.listen is its real address from the start (the sandbox PSP
// delivers webhooks to it) and no other process can take the port between.
func Child(t testing.TB, cfg config.Config) (string, *exec.Cmd) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	lnFile, err := ln.(*net.TCPListener).File()
	require.NoError(t, err)
	cfg.Listen = ln.Addr().String()
	raw, err := json.Marshal(cfg)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	cmd.ExtraFiles = []*os.File{lnFile}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	err = cmd.Start()
	// The process has its copy; the port stays bound while it runs.
	_ = lnFile.Close()
	_ = ln.Close()
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "LISTEN "); ok {
				addr <- a
			}
		}
	}()
	select {
	case a := <-addr:
		return "http://" + a, cmd
	case <-time.After(60 * time.Second):
		t.Fatal("presenced did not start in its own process")
		return "", nil
	}
}
