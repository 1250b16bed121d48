package viewers_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/keyring"
	"github.com/presenced/presenced/internal/module/moduletest"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/viewers"
)

// Count is what booking's hotel search shows beside each hotel. It needs a
// part that reads counts: here the reader, on Redis and the read-only
// login, as the browse plane runs it. Nobody has sent a heartbeat for the
// hotel yet, so it counts nobody.
func ExampleModule_Count() {
	env := testenv.Example("ExampleModule_Count")
	defer env.Close()
	ctx := context.Background()
	m, err := viewers.New(viewers.Deps{
		Config: config.Default().Viewers, Keys: store.NewKeyspace(testenv.Prefix(env)),
		CookieKeys: func() (*keyring.Ring, error) { return nil, errors.New("no heartbeats here") },
		Metrics:    prometheus.NewRegistry(), Log: testenv.Logger(),
	})
	if err != nil {
		panic(err)
	}
	_, err = m.Count(ctx, "lisbon-100")
	fmt.Println("before a part started:", errors.Is(err, viewers.ErrNotStarted))

	ro, err := pgxpool.New(ctx, testenv.ReadOnlyURL(env))
	if err != nil {
		panic(err)
	}
	env.Cleanup(ro.Close) // after the host stops the tier loop
	host := moduletest.New(env, nil, moduletest.Stores{Redis: testenv.Redis(env), ReadOnly: ro})
	if err := m.StartReader(ctx, host); err != nil {
		panic(err)
	}
	c, err := m.Count(ctx, "lisbon-100")
	fmt.Println(c.Hotel, c.Count, "viewers, stale:", c.Stale, err)
	// Output:
	// before a part started: true
	// lisbon-100 0 viewers, stale: false <nil>
}
