package batch

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a run that answers each item with nil and records batches.
type recorder struct {
	mu      sync.Mutex
	batches [][]int
}

func (r *recorder) run(_ context.Context, batch []*Call[int]) {
	items := make([]int, len(batch))
	for i, c := range batch {
		items[i] = c.Item
	}
	r.mu.Lock()
	r.batches = append(r.batches, items)
	r.mu.Unlock()
	for _, c := range batch {
		c.Answer(nil)
	}
}

func (r *recorder) sizes() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int
	for _, b := range r.batches {
		out = append(out, len(b))
	}
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, time.Millisecond, what)
}

// An idle group runs a caller's item at once, alone.
func TestAnIdleGroupRunsAnItemAlone(t *testing.T) {
	var r recorder
	g := New(2, 10, r.run, errors.New("unanswered"))
	require.NoError(t, g.Do(context.Background(), 7))
	require.Equal(t, [][]int{{7}}, r.batches)
	require.Zero(t, g.Waiting())
}

// TryAlone runs its work in a free slot, which a batch then waits for; it
// never waits itself for a busy slot.
func TestTryAloneTakesOnlyAFreeSlotNobodyWaitsFor(t *testing.T) {
	var r recorder
	g := New(1, 10, r.run, errors.New("unanswered"))
	inside, leave := make(chan struct{}), make(chan struct{})
	ranAlone := make(chan bool, 1)
	go func() { ranAlone <- g.TryAlone(func() { close(inside); <-leave }) }()
	<-inside
	require.False(t, g.TryAlone(func() { t.Error("ran in a busy slot") }), "every slot busy")
	done := make(chan error, 1)
	go func() { done <- g.Do(context.Background(), 1) }()
	waitFor(t, "queued behind the work alone", func() bool { return g.Queued() == 1 })
	close(leave)
	require.True(t, <-ranAlone)
	require.NoError(t, <-done)
	require.Equal(t, [][]int{{1}}, r.batches)
	require.True(t, g.TryAlone(func() {}), "an idle group")
}

// Callers arriving while every slot is busy leave together, oldest first,
// at most a batch at a time, and each gets its own answer.
func TestQueuedCallersShareBatches(t *testing.T) {
	var r recorder
	g := New(1, 4, r.run, errors.New("unanswered"))
	resume := g.Pause()
	var wg sync.WaitGroup
	errs := make([]error, 10)
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = g.Do(context.Background(), i)
		}()
		waitFor(t, "queued in order", func() bool { return g.Queued() == i+1 })
	}
	resume()
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, []int{4, 4, 2}, r.sizes())
	require.Equal(t, []int{0, 1, 2, 3}, r.batches[0], "oldest first")
}

// A caller whose context ends while it is queued leaves without running;
// the others are not affected.
func TestACallerGivesUpOnlyWhileQueued(t *testing.T) {
	var r recorder
	g := New(1, 10, r.run, errors.New("unanswered"))
	resume := g.Pause()
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- g.Do(ctx, 1) }()
	stays := make(chan error, 1)
	go func() { stays <- g.Do(context.Background(), 2) }()
	waitFor(t, "both queued", func() bool { return g.Queued() == 2 })
	cancel()
	err := <-gaveUp
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, ErrLeftQueue)
	require.Equal(t, 1, g.Queued())
	resume()
	require.NoError(t, <-stays)
	require.Equal(t, [][]int{{2}}, r.batches, "the abandoned item never ran")
}

// Once taken into a batch, an item's caller waits for its answer even if
// its context ends, and the batch does not see that context end.
func TestATakenCallWaitsForItsAnswer(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var runCtxErr error
	g := New(1, 10, func(ctx context.Context, batch []*Call[int]) {
		close(entered)
		<-release
		runCtxErr = ctx.Err()
		for _, c := range batch {
			c.Answer(nil)
		}
	}, errors.New("unanswered"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Do(ctx, 1) }()
	<-entered
	cancel()
	close(release)
	require.NoError(t, <-done)
	require.NoError(t, runCtxErr)
}

// A run that panics leaves no caller waiting: those it did not answer get
// the group's unanswered error (the panic itself goes on in its caller).
func TestAPanickingRunAnswersTheRestOfItsBatch(t *testing.T) {
	unanswered := errors.New("unanswered")
	g := New(1, 10, func(_ context.Context, batch []*Call[int]) {
		batch[0].Answer(nil)
		if len(batch) > 1 {
			panic("boom")
		}
	}, unanswered)
	resume := g.Pause()
	errs := make(chan error, 3)
	for i := range 3 {
		go func() {
			defer func() {
				if recover() != nil {
					errs <- errors.New("panicked")
				}
			}()
			errs <- g.Do(context.Background(), i)
		}()
	}
	waitFor(t, "three queued", func() bool { return g.Queued() == 3 })
	resume()
	var got []error
	for range 3 {
		got = append(got, <-errs)
	}
	// The caller that ran the batch panicked. The first item was answered
	// nil before the panic, the other two got unanswered; whichever of the
	// three callers ran the batch saw the panic instead of its answer.
	var nils, unans, panics int
	for _, err := range got {
		switch {
		case err == nil:
			nils++
		case errors.Is(err, unanswered):
			unans++
		default:
			panics++
		}
	}
	require.Equal(t, 1, panics, "%v", got)
	require.Equal(t, 2, nils+unans, "%v", got)
	require.Zero(t, g.Waiting())
}

// No more than slots batches run at once.
func TestSlotsBoundConcurrentBatches(t *testing.T) {
	var mu sync.Mutex
	var now, peak int
	g := New(3, 1, func(_ context.Context, batch []*Call[int]) {
		mu.Lock()
		now++
		peak = max(peak, now)
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		now--
		mu.Unlock()
		batch[0].Answer(nil)
	}, errors.New("unanswered"))
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			require.NoError(t, g.Do(context.Background(), i))
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, peak, 3)
	require.Equal(t, 3, g.Slots())
}

// With GatherRunnable, callers that are runnable when a caller takes a
// free slot go in its batch; without, that caller goes alone. On one
// processor the goroutines started just before are exactly that. Not
// parallel: it sets GOMAXPROCS for the whole process.
func TestGatherRunnableTakesTheCallersAboutToArrive(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	first := func(opts ...Option) int {
		// The scheduler looks at its global queue, where the yielding
		// caller waits, first on one pick in 61: best of three rounds.
		most := 0
		for range 3 {
			r := &recorder{}
			g := New(1, 100, r.run, errors.New("unanswered"), opts...)
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Add(1)
				go func() { defer wg.Done(); _ = g.Do(context.Background(), i+1) }()
			}
			require.NoError(t, g.Do(context.Background(), 0))
			wg.Wait()
			most = max(most, r.sizes()[0])
		}
		return most
	}
	require.Equal(t, 9, first(GatherRunnable()), "the eight runnable callers join the first")
	require.Equal(t, 1, first(), "without gathering the first goes alone")
}
