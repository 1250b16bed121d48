package presence

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

// statusReads holds the pipelines that read a user's status until
// released, counts them, and fails the first one when told to.
type statusReads struct {
	key     string
	release chan struct{}
	failOne bool

	mu sync.Mutex
	n  int
}

func (h *statusReads) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *statusReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *statusReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		reads := false
		for _, c := range cmds {
			args := c.Args()
			if strings.EqualFold(c.Name(), "hmget") && len(args) > 1 && args[1] == h.key {
				reads = true
			}
		}
		if !reads {
			return next(ctx, cmds)
		}
		h.mu.Lock()
		h.n++
		first := h.n == 1
		h.mu.Unlock()
		<-h.release
		if first && h.failOne {
			return errors.New("status read failed")
		}
		return next(ctx, cmds)
	}
}

func (h *statusReads) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// followTogether has n users follow subject at once while its first status
// read is held, and returns each follow's error and what each user sees.
func followTogether(t *testing.T, failFirstRead bool) (reads int, errs []error, seen []string) {
	t.Helper()
	rdb := testenv.Redis(t)
	m := newTestModule(t, rdb, testenv.Prefix(t), nil)
	ctx := context.Background()
	_, err := m.st.step(ctx, "bob", "open", store.NewToken()[:16])
	require.NoError(t, err)
	h := &statusReads{key: m.keys.userKey("bob", partStatus), release: make(chan struct{}), failOne: failFirstRead}
	rdb.AddHook(h)

	const n = 8
	lus := make([]*localUser, n)
	errs = make([]error, n)
	var wg sync.WaitGroup
	for i := range lus {
		lus[i] = &localUser{id: fmt.Sprintf("follower-%d", i), subjects: map[string]*subject{}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, errs[i] = m.f.follow(ctx, lus[i], []string{"bob"}, nil)
		}()
	}
	// Every follower joined the subject while its first read is held;
	// then they get time to reach their own reads, if they make any.
	require.Eventually(t, func() bool {
		m.f.mu.Lock()
		s := m.f.subjects["bob"]
		m.f.mu.Unlock()
		if s == nil || h.count() == 0 {
			return false
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.watchers) == n
	}, 10*time.Second, time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	close(h.release)
	wg.Wait()
	for _, lu := range lus {
		if s := lu.subjects["bob"]; s != nil {
			seen = append(seen, s.state().st.Status)
		} else {
			seen = append(seen, "")
		}
	}
	return h.count(), errs, seen
}

// Followers who follow a new subject while the first follow is reading its
// status wait for that read instead of each reading it again: a connect
// burst otherwise read each new subject about five times.
func TestFollowersOfANewSubjectShareItsFirstRead(t *testing.T) {
	t.Parallel()
	reads, errs, seen := followTogether(t, false)
	require.Equal(t, 1, reads, "status reads of one new subject")
	for i := range errs {
		require.NoError(t, errs[i])
		require.Equal(t, StatusOnline, seen[i])
	}
}

// When the first read fails, the followers that waited for it read the
// status themselves: none is left without one.
func TestFollowersReadASubjectWhoseFirstReadFailed(t *testing.T) {
	t.Parallel()
	reads, errs, seen := followTogether(t, true)
	require.GreaterOrEqual(t, reads, 2)
	failed := 0
	for i := range errs {
		if errs[i] != nil {
			failed++
			continue
		}
		require.Equal(t, StatusOnline, seen[i], "follower %d", i)
	}
	require.Equal(t, 1, failed, "only the follow whose read failed fails")
}
