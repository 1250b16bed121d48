package cli

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// HealthcheckCmd is `presenced healthcheck`: a container health check for
// engines that run a command inside the container (docker compose), where
// the image has no shell or curl to ask /readyz with.
func HealthcheckCmd() *cobra.Command {
	var (
		url     string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "healthcheck [--url http://127.0.0.1:8080/readyz] [--timeout 3s]",
		Short: "Exit 0 when a serve process answers /readyz with 200 (a container health check)",
		Example: `  # docker-compose.yml
  healthcheck:
    test: ["CMD", "/usr/local/bin/presenced", "healthcheck"]`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client := &http.Client{Timeout: timeout}
			resp, err := client.Get(url)
			if err != nil {
				return fmt.Errorf("healthcheck: %w", err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			if resp.StatusCode != http.StatusOK {
				// The body names the failing check: docker inspect shows it.
				return fmt.Errorf("healthcheck: %s answered %d: %s", url, resp.StatusCode, strings.TrimSpace(string(body)))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "url", "http://127.0.0.1:8080/readyz", "readiness URL of the serve process")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "give up after this")
	return cmd
}
