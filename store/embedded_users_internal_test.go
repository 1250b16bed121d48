package store

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A private server whose every user is gone (killed before it could stop
// the server) is stopped by the reaper; one still in use is left alone.
func TestReapStopsOnlyAServerNobodyUses(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "pg")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ep, err := StartEmbeddedPostgres(ctx, dir, "", slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = ep.StopImmediate() })
	pid, ok := postmasterPID(dir)
	require.True(t, ok)

	free, err := ReapEmbeddedPostgres(dir)
	require.NoError(t, err)
	require.False(t, free, "the folder has a user")
	require.True(t, processAlive(pid), "a server in use was stopped")

	ep.leave() // what the kernel does for a process killed with SIGKILL
	free, err = ReapEmbeddedPostgres(dir)
	require.NoError(t, err)
	require.True(t, free)
	require.False(t, processAlive(pid), "the orphaned server still runs")

	_, err = os.Stat(dir)
	require.NoError(t, err, "the reaper leaves removing the folder to its caller")
}
