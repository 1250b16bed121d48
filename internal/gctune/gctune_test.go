package gctune

import (
	"context"
	"os"
	"runtime"
	rtmetrics "runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

func TestFloorPercentPutsTheNextCollectionAtTheFloor(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	require.Equal(t, 100, floorPercent(40*mib, 64*mib), "live heap past half the floor: GOGC 100")
	require.Equal(t, 100, floorPercent(32*mib, 64*mib))
	require.Equal(t, 300, floorPercent(16*mib, 64*mib), "16 MiB live collects at 64")
	require.Equal(t, 540, floorPercent(10*mib, 64*mib))
	require.Equal(t, maxFloorPercent, floorPercent(1*mib, 64*mib), "bounded for a nearly empty heap")
	require.Equal(t, 100, floorPercent(1*mib, 0), "off")
}

func TestHeadroomPercentLetsTheHeapGrowByTheHeadroom(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	require.Equal(t, 256, headroomPercent(100*mib, 256*mib), "100 MiB live collects at 356")
	require.Equal(t, 100, headroomPercent(300*mib, 256*mib), "a heap larger than the headroom: GOGC 100")
	require.Equal(t, maxFloorPercent, headroomPercent(1*mib, 256*mib), "bounded for a nearly empty heap")
	require.Equal(t, 100, headroomPercent(10*mib, 0), "off")
}

// counter is a process's count of opened connections.
type counter struct{ n atomic.Int64 }

func (c *counter) Opened() int64 { return c.n.Load() }

// openFast opens well past the burst rate until the returned stop is
// called.
func openFast(c *counter) (stop func()) {
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
				// Past the burst rate even if only one tick a window
				// comes through on a loaded machine.
				c.n.Add(100)
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

func forcedGCs() uint64 { return runtimeCount("/gc/cycles/forced:gc-cycles") }

// A burst of opens raises GOGC to the headroom's; once opens stop it is
// back to the floor's (100 here: no floor), and one forced collection
// hands the burst's garbage back.
func TestConnectBurstRaisesGOGCUntilItIsOver(t *testing.T) {
	tu, opens, stopTuner := runTuner(t, 0, 4<<30)
	runtime.GC()
	require.Equal(t, uint64(100), gogcNow(), "no burst yet")
	forced := forcedGCs()

	stopOpening := openFast(opens)
	testenv.Eventually(t, 10*time.Second, func() bool { return gogcNow() > 100 }, "GOGC raised during the burst")
	stopOpening()
	testenv.Eventually(t, 10*time.Second, func() bool { return gogcNow() == 100 }, "GOGC back once opens stop")
	testenv.Eventually(t, 10*time.Second, func() bool { return forcedGCs() > forced }, "the burst's garbage handed back")
	require.False(t, tu.burst.Load())
	stopTuner()
	require.Equal(t, uint64(100), gogcNow())
}

// A heap larger than the headroom collects at GOGC=100 through a burst,
// and its end forces no collection (one of a large heap stalled the
// traffic after the burst).
func TestBurstOnAHeapPastTheHeadroomForcesNoCollection(t *testing.T) {
	tu, opens, stopTuner := runTuner(t, 0, 1)
	forced := forcedGCs()
	stopOpening := openFast(opens)
	testenv.Eventually(t, 10*time.Second, tu.burst.Load, "the burst noticed")
	require.Equal(t, uint64(100), gogcNow(), "no headroom over this heap")
	stopOpening()
	testenv.Eventually(t, 10*time.Second, func() bool { return !tu.burst.Load() }, "the burst over")
	// The release would come right after the burst ends; give it time.
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, forced, forcedGCs(), "no forced collection")
	stopTuner()
}

// A few opens a second are a gateway's ordinary arrivals, not a burst.
func TestSlowOpensAreNoBurst(t *testing.T) {
	tu, opens, stopTuner := runTuner(t, 0, 4<<30)
	for range 10 {
		opens.n.Add(1)
		time.Sleep(50 * time.Millisecond)
	}
	require.False(t, tu.burst.Load(), "20 opens a second")
	require.Equal(t, uint64(100), gogcNow())
	stopTuner()
}

// runTuner runs a tuner until the returned stop is called. Tests using it
// are not parallel: GOGC is the process's.
func runTuner(t *testing.T, floor, headroom int64) (tu *Tuner, opens *counter, stop func()) {
	t.Helper()
	if _, set := os.LookupEnv("GOGC"); set {
		t.Skip("GOGC set in the environment: the tuner leaves it alone")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	opens = &counter{}
	tu = New(floor, headroom, opens, testenv.Logger())
	go func() {
		defer close(done)
		tu.Run(ctx)
	}()
	return tu, opens, func() {
		cancel()
		<-done
	}
}

func gogcNow() uint64 { return runtimeCount("/gc/gogc:percent") }

// runtimeCount reads one uint64 runtime metric.
func runtimeCount(name string) uint64 {
	s := []rtmetrics.Sample{{Name: name}}
	rtmetrics.Read(s)
	return s[0].Value.Uint64()
}

// After a collection the floor raises GOGC for a small live heap, and puts
// it back when the process stops.
func TestHeapFloorRaisesGOGCAfterACollection(t *testing.T) {
	_, _, stopTuner := runTuner(t, 4<<30, 0)
	testenv.Eventually(t, 10*time.Second, func() bool {
		runtime.GC()
		return gogcNow() > 100
	}, "GOGC raised after a collection")
	stopTuner()
	require.Equal(t, uint64(100), gogcNow(), "back to 100 once stopped")
	runtime.GC()
	require.Equal(t, uint64(100), gogcNow(), "and no later collection raises it again")
}
