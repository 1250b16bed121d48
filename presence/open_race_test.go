package presence_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
)

// pauseAfterOpen holds the first session open of one user right after its
// script answered, until released: the moment between the open reading the
// user's subscriptions and the connection being attached to its user.
type pauseAfterOpen struct {
	sessionsKey string
	once        sync.Once
	opened      chan struct{}
	release     chan struct{}
}

func (p *pauseAfterOpen) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (p *pauseAfterOpen) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		p.maybePause([]redis.Cmder{cmd})
		return err
	}
}

func (p *pauseAfterOpen) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		p.maybePause(cmds)
		return err
	}
}

func (p *pauseAfterOpen) maybePause(cmds []redis.Cmder) {
	for _, c := range cmds {
		args := c.Args()
		if !slices.Contains(args, any(p.sessionsKey)) || !slices.Contains(args, any("open")) {
			continue
		}
		p.once.Do(func() {
			close(p.opened)
			<-p.release
		})
		return
	}
}

// pauseOpenOf holds the first session open of user on s, right after its
// script answered, until the pause is released.
func pauseOpenOf(t *testing.T, s *server, cfg config.Config, user string) *pauseAfterOpen {
	t.Helper()
	rdb, err := s.app.Redis(context.Background())
	require.NoError(t, err)
	pause := &pauseAfterOpen{
		sessionsKey: cfg.Redis.Prefix + "{presence:" + user + "}:sessions",
		opened:      make(chan struct{}), release: make(chan struct{}),
	}
	rdb.AddHook(pause)
	return pause
}

// A subscription change made on another gateway after a connection's open
// read the user's subscriptions, but announced before the connection was
// attached to its user (so no one here was told), is still followed by it.
func TestSubscriptionChangedElsewhereWhileAConnectionOpensIsFollowed(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	s1, s2 := startGateways(t, cfg)

	phone := connect(t, s2, "alice")
	phone.subscribe("bob")

	pause := pauseOpenOf(t, s1, cfg, "alice")

	var tab *wsClient
	dialed := make(chan struct{})
	go func() {
		defer close(dialed)
		tab = connect(t, s1, "alice")
	}()
	select {
	case <-pause.opened:
	case <-time.After(waitFor):
		t.Fatal("the open of alice's second connection was not seen")
	}
	id := phone.send("subscriptions:add", map[string]any{"users": []string{"carol"}})
	require.Equal(t, "presence:updated", phone.reply(id).Event)
	// Time for s1 to receive the announcement while the open is held; if
	// it comes later it reaches the attached connection the usual way.
	time.Sleep(300 * time.Millisecond)
	close(pause.release)
	<-dialed
	require.NotNil(t, tab)

	carol := connect(t, s2, "carol")
	defer carol.closeAbruptly()
	tab.statusOf("carol", "online")
}

// A user who hides their status while a follower's connection opens, after
// the connection's upgrade was checked but before the follower sets name
// the follower (so their change finds no one to tell), is not shown to
// it: the connection checks again once it follows them.
func TestStatusHiddenWhileAFollowerConnectsIsNotShown(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	s := startServer(t, cfg)
	bob := connect(t, s, "hrbob")

	pause := pauseOpenOf(t, s, cfg, "hralice")

	var alice *wsClient
	dialed := make(chan struct{})
	go func() {
		defer close(dialed)
		alice = dialWSAt(t, wsURL(s.base)+subscribeQuery("hrbob"), http.Header{"Authorization": {"Bearer " + token(t, "hralice")}})
	}()
	select {
	case <-pause.opened:
	case <-time.After(waitFor):
		t.Fatal("the open of alice's connection was not seen")
	}
	require.Equal(t, "nobody", bob.setPrivacy(map[string]any{"status": "nobody"})["status"])
	close(pause.release)
	<-dialed
	require.NotNil(t, alice)

	// The snapshot and the withdrawal, in either order.
	var snap *updated
	var withdrawn *errorJSON
	deadline := time.After(waitFor)
	for snap == nil || withdrawn == nil {
		select {
		case f, ok := <-alice.frames:
			require.True(t, ok, "alice's connection closed")
			switch f.Event {
			case "presence:updated":
				var u updated
				require.NoError(t, json.Unmarshal(f.Payload, &u))
				require.NotContains(t, statusesByUser(u), "hrbob", "alice was shown bob's status")
				if u.Resync {
					snap = &u
				}
			case "error":
				withdrawn = &errorJSON{}
				require.NoError(t, json.Unmarshal(f.Payload, withdrawn))
			}
		case <-deadline:
			t.Fatalf("snapshot seen %v, withdrawal seen %v", snap != nil, withdrawn != nil)
		}
	}
	require.Equal(t, "forbidden", withdrawn.Code)
	require.Equal(t, []string{"hrbob"}, withdrawn.Users)
	require.NotContains(t, members(t, cfg, "hralice", "subs"), "hrbob", "alice still follows bob")
}

// privacyReads counts the commands that read a user's privacy hash.
type privacyReads struct{ n atomic.Int64 }

func (p *privacyReads) DialHook(next redis.DialHook) redis.DialHook { return next }

func (p *privacyReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		p.count([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (p *privacyReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		p.count(cmds)
		return next(ctx, cmds)
	}
}

func (p *privacyReads) count(cmds []redis.Cmder) {
	for _, c := range cmds {
		if args := c.Args(); c.Name() == "hmget" && len(args) > 1 {
			if k, ok := args[1].(string); ok && strings.HasSuffix(k, "}:privacy") {
				p.n.Add(1)
			}
		}
	}
}

// A connect naming 20 subscriptions reads their settings once when no
// visibility changed while it opened: the follow's check reuses the
// upgrade's, hidden lastActiveAt included. So does a subscriptions:add.
func TestAConnectReadsItsSubscriptionsSettingsOnce(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	s := startServer(t, cfg)
	subjects := make([]string, 20)
	for i := range subjects {
		subjects[i] = fmt.Sprintf("rosub%d", i)
	}
	shy := connect(t, s, subjects[0])
	shy.setPrivacy(map[string]any{"lastActiveAt": "nobody"})
	open := connect(t, s, subjects[1])
	_ = open

	rdb, err := s.app.Redis(context.Background())
	require.NoError(t, err)
	reads := &privacyReads{}
	rdb.AddHook(reads)
	alice := dialWSAt(t, wsURL(s.base)+subscribeQuery(subjects...), http.Header{"Authorization": {"Bearer " + token(t, "roalice")}})
	alice.user = "roalice"
	var u updated
	require.NoError(t, json.Unmarshal(alice.next("presence:updated").Payload, &u))
	require.True(t, u.Resync)
	require.EqualValues(t, len(subjects), reads.n.Load(), "reads of the subscriptions' settings")

	seen := map[string]statusJSON{}
	for _, st := range u.Users {
		seen[st.User] = st
	}
	require.Equal(t, "online", seen[subjects[0]].Status)
	require.Zero(t, seen[subjects[0]].LastActiveAt, "shown a lastActiveAt its user hides")
	require.Equal(t, "online", seen[subjects[1]].Status)
	require.NotZero(t, seen[subjects[1]].LastActiveAt)

	// So does a request adding subscriptions.
	more := []string{"romore0", "romore1", "romore2", "romore3", "romore4"}
	reads.n.Store(0)
	alice.subscribe(more...)
	require.EqualValues(t, len(more), reads.n.Load(), "reads of the added subscriptions' settings")
}
