package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// DrainCmd is `presenced drain`: Kubernetes' preStop hook. It tells the
// serve process (by signal, so nothing outside the container can) to move
// its WebSocket and SSE clients away with the 1012 reconnect hint and to
// answer /readyz 503, and waits until the sockets are gone. SIGTERM, which
// follows, then finds no socket left to close.
func DrainCmd() *cobra.Command {
	var (
		pid     int
		url     string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "drain [--pid 1] [--url http://127.0.0.1:8080] [--timeout 30s]",
		Short: "Move a serve process's sockets away before it stops (Kubernetes preStop)",
		Example: `  # in the container: presenced serve is process 1
  presenced drain --url http://127.0.0.1:8080 --timeout 25s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := syscall.Kill(pid, drainSignal); err != nil {
				return fmt.Errorf("signal process %d: %w", pid, err)
			}
			deadline := time.Now().Add(timeout)
			client := &http.Client{Timeout: 2 * time.Second}
			for {
				open, err := drainingSockets(client, url)
				if err == nil && open == 0 {
					fmt.Fprintln(cmd.OutOrStdout(), "drained")
					return nil
				}
				if time.Now().After(deadline) {
					if err == nil {
						err = fmt.Errorf("%d sockets still open", open)
					}
					return fmt.Errorf("drain did not finish within %s: %w", timeout, err)
				}
				time.Sleep(100 * time.Millisecond)
			}
		},
	}
	cmd.Flags().IntVar(&pid, "pid", 1, "process id of presenced serve (1 in its container)")
	cmd.Flags().StringVar(&url, "url", "http://127.0.0.1:8080", "base URL of that process")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "give up after this (keep it under the pod's terminationGracePeriodSeconds)")
	return cmd
}

// drainingSockets reads the open sockets from /readyz once it answers
// draining.
func drainingSockets(client *http.Client, base string) (int, error) {
	resp, err := client.Get(base + "/readyz")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var body struct {
		Status  string `json:"status"`
		Sockets int    `json:"sockets"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, fmt.Errorf("readyz: %w", err)
	}
	if body.Status != "draining" {
		return 0, errors.New("not draining yet")
	}
	return body.Sockets, nil
}
