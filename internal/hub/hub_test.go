package hub

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type testBundle struct {
	hub   *Hub
	rdb   redis.UniversalClient
	topic func(id string) string
}

func setup(t *testing.T, rdb redis.UniversalClient) testBundle {
	t.Helper()
	h, err := New(rdb, prometheus.NewRegistry(), testenv.Logger())
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	ks := store.NewKeyspace(testenv.Prefix(t))
	return testBundle{hub: h, rdb: rdb, topic: func(id string) string { return ks.Entity("topic", id).Key("events") }}
}

func backends(t *testing.T) map[string]func() redis.UniversalClient {
	return map[string]func() redis.UniversalClient{
		"single":  func() redis.UniversalClient { return testenv.Redis(t) },
		"cluster": func() redis.UniversalClient { return testenv.RedisCluster(t) },
	}
}

// counter is a subscriber that counts what it receives.
type counter struct {
	n      atomic.Int64
	resync atomic.Int64
}

func (c *counter) Deliver(m Message) {
	if m.Resync {
		c.resync.Add(1)
		return
	}
	c.n.Add(1)
}

// upstreamSubscriptions asks Redis how many subscribers a channel has.
func upstreamSubscriptions(t *testing.T, rdb redis.UniversalClient, channel string) int64 {
	t.Helper()
	ctx := context.Background()
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, channel)
		require.NoError(t, err)
		res, err := node.Do(ctx, "PUBSUB", "SHARDNUMSUB", channel).Slice()
		require.NoError(t, err)
		return res[1].(int64)
	}
	res, err := rdb.PubSubNumSub(ctx, channel).Result()
	require.NoError(t, err)
	return res[channel]
}

func TestThousandSubscribersCostOneUpstreamSubscription(t *testing.T) {
	for name, backend := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := setup(t, backend())
			ctx := testenv.Context(t)
			topic := b.topic("busy")
			subs := make([]*counter, 1000)
			for i := range subs {
				subs[i] = &counter{}
				require.NoError(t, b.hub.Subscribe(ctx, topic, subs[i]))
			}
			require.Equal(t, int64(1), upstreamSubscriptions(t, b.rdb, topic))
			require.Equal(t, 1, b.hub.Topics())
			require.Equal(t, 1000, b.hub.Subscribers(topic))

			require.NoError(t, b.hub.Publish(ctx, topic, []byte("hello")))
			testenv.Eventually(t, 5*time.Second, func() bool {
				for _, s := range subs {
					if s.n.Load() != 1 {
						return false
					}
				}
				return true
			}, "every local subscriber receives the message once")

			for _, s := range subs[:999] {
				b.hub.Unsubscribe(topic, s)
			}
			require.Equal(t, int64(1), upstreamSubscriptions(t, b.rdb, topic), "still one while a subscriber remains")
			b.hub.Unsubscribe(topic, subs[999])
			require.Equal(t, 0, b.hub.Topics())
			testenv.Eventually(t, 5*time.Second, func() bool {
				return upstreamSubscriptions(t, b.rdb, topic) == 0
			}, "the last subscriber leaving releases the upstream subscription")
		})
	}
}

func TestSlowSubscriberIsDroppedFastOnesKeepReceiving(t *testing.T) {
	for name, backend := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := setup(t, backend())
			ctx := testenv.Context(t)
			topic := b.topic("feed")
			slow := b.hub.NewQueue(4) // never drained
			fast := b.hub.NewQueue(4)
			var got atomic.Int64
			go func() {
				for range fast.C() {
					got.Add(1)
				}
			}()
			require.NoError(t, b.hub.Subscribe(ctx, topic, slow))
			require.NoError(t, b.hub.Subscribe(ctx, topic, fast))
			const n = 50
			for i := 0; i < n; i++ {
				require.NoError(t, b.hub.Publish(ctx, topic, []byte(strconv.Itoa(i))))
				// Pace the publisher so the fast reader is never the bottleneck.
				testenv.Eventually(t, 5*time.Second, func() bool { return got.Load() == int64(i+1) }, "fast subscriber receives message %d", i)
			}
			select {
			case <-slow.Evicted():
			default:
				t.Fatal("the slow subscriber was not evicted")
			}
			require.Equal(t, 4, slow.Len(), "an evicted queue takes nothing more")
			require.Equal(t, float64(1), testutil.ToFloat64(b.hub.m.slowDrops))
		})
	}
}

func TestSubscribersInDifferentSlotsOnACluster(t *testing.T) {
	b := setup(t, testenv.RedisCluster(t))
	ctx := testenv.Context(t)
	slots := map[int]bool{}
	var subs []*counter
	var topics []string
	for i := 0; len(slots) < 6; i++ {
		topic := b.topic(strconv.Itoa(i))
		if slots[keySlot(topic)] {
			continue
		}
		slots[keySlot(topic)] = true
		c := &counter{}
		require.NoError(t, b.hub.Subscribe(ctx, topic, c))
		subs, topics = append(subs, c), append(topics, topic)
	}
	for _, topic := range topics {
		require.NoError(t, b.hub.Publish(ctx, topic, []byte("x")))
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		for _, c := range subs {
			if c.n.Load() != 1 {
				return false
			}
		}
		return true
	}, "a message on each slot reaches its subscriber")
	for i, topic := range topics {
		b.hub.Unsubscribe(topic, subs[i])
	}
	b.hub.mu.Lock()
	open := len(b.hub.nodes)
	b.hub.mu.Unlock()
	require.Zero(t, open, "node connections are closed with their last topic")
}

func TestResubscribesAfterRedisRestart(t *testing.T) {
	srv := testenv.NewRedisServer(t)
	rdb := testenv.RedisClient(t, srv.URL)
	b := setup(t, rdb)
	ctx := testenv.Context(t)
	topic := b.topic("restart")
	c := &counter{}
	require.NoError(t, b.hub.Subscribe(ctx, topic, c))

	require.NoError(t, srv.Stop())
	testenv.RestartRedisServer(t, srv.URL)

	testenv.Eventually(t, 15*time.Second, func() bool { return c.resync.Load() >= 1 }, "subscribers are told to resync")
	require.NoError(t, b.hub.Publish(ctx, topic, []byte("after")))
	testenv.Eventually(t, 5*time.Second, func() bool { return c.n.Load() == 1 }, "messages flow again")
}

func TestSubscribeWaitsForRedisAndGivesUpWithTheContext(t *testing.T) {
	srv := testenv.NewRedisServer(t)
	rdb := testenv.RedisClient(t, srv.URL)
	b := setup(t, rdb)
	require.NoError(t, srv.Stop())
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := b.hub.Subscribe(ctx, b.topic("down"), &counter{})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Zero(t, b.hub.Topics(), "a failed subscribe leaves nothing behind")
}

func TestClosedHubRefusesSubscribers(t *testing.T) {
	b := setup(t, testenv.Redis(t))
	require.NoError(t, b.hub.Close())
	require.ErrorIs(t, b.hub.Subscribe(context.Background(), b.topic("x"), &counter{}), ErrClosed)
	require.NoError(t, b.hub.Close(), "close twice")
}

func TestKeySlotMatchesRedis(t *testing.T) {
	rdb := testenv.RedisCluster(t)
	for _, k := range []string{"a", "pd:{hotel:42}:x", "{user:alice}", "no{}tag", "x{y}z{w}", "ünïcode"} {
		want, err := rdb.ClusterKeySlot(context.Background(), k).Result()
		require.NoError(t, err)
		require.Equal(t, int(want), keySlot(k), k)
	}
}

// BenchmarkBroadcast10k measures local fan-out of one message to 10,000
// subscribers' queues (the part of a broadcast the hub owns).
func BenchmarkBroadcast10k(b *testing.B) {
	const n = 10_000
	h, err := New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), prometheus.NewRegistry(), testenv.Logger())
	if err != nil {
		b.Fatal(err)
	}
	t := &topic{name: "t", members: map[Subscriber]struct{}{}}
	queues := make([]*Queue, n)
	for i := range queues {
		queues[i] = h.NewQueue(64)
		t.add(queues[i])
	}
	payload := []byte(`{"event":"count:updated","payload":{"hotel":"h1","count":1234}}`)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.fanout(t, Message{Topic: "t", Payload: payload})
		if i%64 == 63 { // the connections' writers drain their queues
			for _, q := range queues {
				for len(q.ch) > 0 {
					<-q.ch
				}
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/delivery")
	for _, q := range queues {
		select {
		case <-q.Evicted():
			b.Fatal("a drained queue was evicted")
		default:
		}
	}
}

// PublishMany reaches the subscribers of every topic, in several slots on
// a cluster, in one round trip per node.
func TestPublishManyReachesEveryTopic(t *testing.T) {
	t.Parallel()
	for name, rdb := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := setup(t, rdb())
			ctx := testenv.Context(t)
			var msgs []Outgoing
			var subs []*counter
			for i := range 40 {
				topic := b.topic(strconv.Itoa(i))
				c := &counter{}
				require.NoError(t, b.hub.Subscribe(ctx, topic, c))
				subs = append(subs, c)
				msgs = append(msgs, Outgoing{Topic: topic, Payload: []byte("x")}, Outgoing{Topic: topic, Payload: []byte("y")})
			}
			rt := &testenv.RedisTrips{}
			b.rdb.AddHook(rt)
			rt.Start()
			require.NoError(t, b.hub.PublishMany(rt.Mark(ctx), msgs))
			trips, names := rt.Count()
			require.Equal(t, 1, trips, "round trips: %v", names)
			require.Len(t, names, len(msgs))
			testenv.Eventually(t, 5*time.Second, func() bool {
				for _, c := range subs {
					if c.n.Load() != 2 {
						return false
					}
				}
				return true
			}, "both messages of each topic reach its subscriber")
		})
	}
}
