package testenv

import (
	"bufio"
	"io"
	"strings"
	"testing"
)

// SSEEvent is one Server-Sent Event as a test client reads it.
type SSEEvent struct {
	Event string
	Data  string
}

// SSEReader returns a function yielding the events of a text/event-stream
// body one by one; comment lines (keepalives) are skipped. The test fails if
// the stream ends first.
func SSEReader(t testing.TB, body io.Reader) func() SSEEvent {
	r := bufio.NewReader(body)
	return func() SSEEvent {
		t.Helper()
		var ev SSEEvent
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("event stream ended: %v", err)
			}
			line = strings.TrimRight(line, "\n")
			switch {
			case line == "" && (ev.Event != "" || ev.Data != ""):
				return ev
			case strings.HasPrefix(line, "event: "):
				ev.Event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.Data = strings.TrimPrefix(line, "data: ")
			}
		}
	}
}
