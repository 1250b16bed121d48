package loadgen

import (
	"context"
	"io"
	"net/http"
	"strings"

	"github.com/spf13/pflag"
)

// HTTP is the trivial scenario: GET one path (default /healthz) and expect
// a 2xx. It proves the frame and measures the server's bare overhead.
type HTTP struct {
	path string
}

// NewHTTP returns the http scenario.
func NewHTTP() *HTTP { return &HTTP{} }

func (s *HTTP) Name() string { return "http" }

func (s *HTTP) Describe() string { return "GET a path (default /healthz) and expect 2xx" }

func (s *HTTP) Flags(fs *pflag.FlagSet) {
	fs.StringVar(&s.path, "path", "/healthz", "path to request")
}

func (s *HTTP) Run(ctx context.Context, r *Runner) error {
	url := strings.TrimRight(r.Options.Target, "/") + s.path
	r.Label("requests")
	r.Loop(ctx, func(ctx context.Context, _ int) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := r.Client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return StatusError(resp.StatusCode)
		}
		return nil
	})
	return nil
}
