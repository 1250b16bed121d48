package store

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A Redis that stays down makes go-redis log without end: a burst gets
// through, then one line per interval with the count held back.
func TestRedisLoggerIsRateLimited(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	l := newRedisLogger(slog.New(slog.NewTextHandler(&out, nil)), 3, 10*time.Second)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	for i := 0; i <= 100; i++ {
		l.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts", 5)
		now = now.Add(100 * time.Millisecond) // the last call comes 10 s after the first
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 4, "a burst of three, then one after ten seconds: %s", out.String())
	require.Contains(t, lines[0], "level=WARN")
	require.Contains(t, lines[0], `msg="redis client"`)
	require.Contains(t, lines[0], "failed to dial after 5 attempts")
	require.Contains(t, lines[3], "held_back=97")
}
