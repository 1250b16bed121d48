package presence

import (
	"context"
	"os"
	"runtime"
	rtmetrics "runtime/metrics"
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

func gogcNow() uint64 {
	s := []rtmetrics.Sample{{Name: "/gc/gogc:percent"}}
	rtmetrics.Read(s)
	return s[0].Value.Uint64()
}

// After a collection the floor raises GOGC for a small live heap, and puts
// it back when the gateway stops. (Not parallel: GOGC is the process's.)
func TestHeapFloorRaisesGOGCAfterACollection(t *testing.T) {
	if _, set := os.LookupEnv("GOGC"); set {
		t.Skip("GOGC set in the environment: the floor leaves it alone")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		runHeapFloor(ctx, 4<<30, testenv.Logger())
	}()
	testenv.Eventually(t, 10*time.Second, func() bool {
		runtime.GC()
		return gogcNow() > 100
	}, "GOGC raised after a collection")
	cancel()
	<-done
	require.Equal(t, uint64(100), gogcNow(), "back to 100 once stopped")
	runtime.GC()
	require.Equal(t, uint64(100), gogcNow(), "and no later collection raises it again")
}
