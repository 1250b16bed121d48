package presence_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
)

// Bad input is answered with the specified error event or close code;
// nothing is written; other connections carry on.
func TestBadInput(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Presence.MaxMessageBytes = 1024
	cfg.Presence.MaxFrameBytes = 4096
	cfg.Presence.MessagesPerSecond = 10
	cfg.Presence.MessageBurst = 20
	s := startServer(t, cfg)
	rdb := redisFor(t, cfg)
	ctx := context.Background()

	// Two bystanders exchange updates the whole time.
	watcher := connect(t, s, "watcher")
	watcher.subscribe("talker")
	talker := connect(t, s, "talker")
	watcher.statusOf("talker", "online")
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		statuses := []string{"busy", "away"}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			talker.send("presence:update", map[string]any{"status": statuses[i%2]})
		}
	}()

	bad := connect(t, s, "mallory")
	statusKey := cfg.Redis.Prefix + "{presence:mallory}:status"
	before, err := rdb.HGetAll(ctx, statusKey).Result()
	require.NoError(t, err)

	bad.sendRaw([]byte(`{"v":1,"event":`))
	require.Equal(t, "bad_json", bad.nextError().Code)
	bad.sendRaw([]byte(`{"v":1,"event":"presence:dance","id":"u1"}`))
	require.Equal(t, "unknown_event", bad.errorReply("u1").Code)
	bad.sendRaw([]byte(`{"v":2,"event":"presence:update","payload":{"status":"busy"},"id":"v2"}`))
	require.Equal(t, "unsupported_version", bad.errorReply("v2").Code)
	bad.sendRaw([]byte(`{"v":1,"event":"presence:update","payload":{"status":"busy","mood":"evil"},"id":"p1"}`))
	require.Equal(t, "bad_payload", bad.errorReply("p1").Code)
	bad.sendRaw([]byte(`{"v":1,"event":"subscriptions:set","payload":{"users":"talker"},"id":"p2"}`))
	require.Equal(t, "bad_payload", bad.errorReply("p2").Code)
	bad.sendRaw([]byte(`{"v":1,"event":"subscriptions:set","payload":{"users":["a{b}"]},"id":"p3"}`))
	require.Equal(t, "bad_payload", bad.errorReply("p3").Code)

	// Over max_message_bytes: refused, the connection stays.
	big := `{"v":1,"event":"subscriptions:set","id":"big","payload":{"users":["` + strings.Repeat("x", 2000) + `"]}}`
	bad.sendRaw([]byte(big))
	require.Equal(t, "message_too_large", bad.nextError().Code)

	// A flood: rate_limited, frames dropped, the connection stays.
	time.Sleep(2 * time.Second) // refill the bucket
	for i := 0; i < 100; i++ {
		bad.sendRaw([]byte(`{"v":1,"event":"presence:update","payload":{"status":"busy"}}`))
	}
	e := bad.nextError()
	require.Equal(t, "rate_limited", e.Code)
	time.Sleep(2 * time.Second)
	id := bad.send("presence:update", map[string]any{"active": true})
	require.Equal(t, "presence:updated", bad.reply(id).Event, "the connection survived")

	after, err := rdb.HGetAll(ctx, statusKey).Result()
	require.NoError(t, err)
	flooded := after["s"] == "busy"
	require.True(t, flooded || after["v"] == before["v"], "only the frames within the rate were applied")
	n, err := rdb.Exists(ctx, cfg.Redis.Prefix+"{presence:mallory}:subs").Result()
	require.NoError(t, err)
	require.Zero(t, n, "no bad request wrote a subscription")

	// Over max_frame_bytes: closed with 1009.
	bad.sendRaw([]byte(`{"v":1,"event":"x","payload":"` + strings.Repeat("y", 5000) + `"}`))
	require.Equal(t, websocket.CloseMessageTooBig, bad.waitClosed().Code)

	close(stop)
	wg.Wait()
	watcher.statusOf("talker", "busy")
	watcher.statusOf("talker", "away")
}

// A flood never writes more than the rate allows.
func TestFloodIsBoundedByTheRate(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Presence.MessagesPerSecond = 5
	cfg.Presence.MessageBurst = 5
	s := startServer(t, cfg)
	c := connect(t, s, "flooder")
	for i := 0; i < 200; i++ {
		c.send("presence:update", map[string]any{"active": i%2 == 0})
	}
	replies, limited := 0, 0
	deadline := time.After(2 * time.Second)
	for done := false; !done; {
		select {
		case f := <-c.frames:
			switch f.Event {
			case "presence:updated":
				replies++
			case "error":
				var e errorJSON
				require.NoError(t, json.Unmarshal(f.Payload, &e))
				require.Equal(t, "rate_limited", e.Code)
				limited++
			}
		case <-deadline:
			done = true
		}
	}
	require.LessOrEqual(t, replies, 5+2*5+1, "burst plus what refilled")
	require.GreaterOrEqual(t, replies, 5)
	require.GreaterOrEqual(t, limited, 1)
	require.LessOrEqual(t, limited, 3, "one error a second, not one per dropped frame")
}
