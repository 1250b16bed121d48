package cluster_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sseEvent is one Server-Sent Event.
type sseEvent struct{ Event, Data string }

// sse follows a Server-Sent Events stream until the test ends; its events
// arrive on the channel, which closes when the stream does.
func sse(t *testing.T, url string) <-chan sseEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, url)
	out := make(chan sseEvent, 64)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		r := bufio.NewReader(resp.Body)
		var ev sseEvent
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimRight(line, "\r\n")
			switch {
			case line == "":
				if ev.Event != "" || ev.Data != "" {
					select {
					case out <- ev:
					case <-ctx.Done():
						return
					}
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event:"):
				ev.Event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
			case strings.HasPrefix(line, "data:"):
				ev.Data += strings.TrimSpace(strings.TrimPrefix(line, "data:"))
			}
		}
	}()
	return out
}

// awaitSSE reads events until one satisfies ok, or within passes.
func awaitSSE(events <-chan sseEvent, within time.Duration, ok func(sseEvent) bool) (sseEvent, bool) {
	deadline := time.After(within)
	for {
		select {
		case ev, open := <-events:
			if !open {
				return sseEvent{}, false
			}
			if ok(ev) {
				return ev, true
			}
		case <-deadline:
			return sseEvent{}, false
		}
	}
}
