package loadgen

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

var sink []byte

// While held, garbage does not start a collection; released, the
// collector's settings are what they were. Not parallel: it changes the
// whole process's collector.
func TestHoldCollectorKeepsCollectionsOutOfTheWindow(t *testing.T) {
	percent := debug.SetGCPercent(100)
	defer debug.SetGCPercent(percent)
	limit := debug.SetMemoryLimit(-1) // -1 reads it

	release := HoldCollector(256 << 20)
	for range 1000 {
		sink = make([]byte, 64<<10) // 64 MiB in all: several collections at GOGC=100
	}
	require.Zero(t, release(), "collections while held")
	require.Equal(t, 100, debug.SetGCPercent(100), "GC percent restored")
	require.Equal(t, limit, debug.SetMemoryLimit(-1), "memory limit restored")
}

// Overlapping holds restore the settings once, when the last ends.
func TestOverlappingHoldsRestoreOnce(t *testing.T) {
	percent := debug.SetGCPercent(100)
	defer debug.SetGCPercent(percent)

	first := HoldCollector(1 << 20)
	second := HoldCollector(1 << 20)
	first()
	require.Equal(t, -1, debug.SetGCPercent(-1), "still held while the second hold lasts")
	second()
	require.Equal(t, 100, debug.SetGCPercent(100), "restored after the last")
}
