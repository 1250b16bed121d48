package booking

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/store"
)

// pipelined runs the calls fill queues in one round trip to Redis (one per
// node of a Cluster: each queued call's keys share a hash tag, different
// calls need not). A hold sends its gates this way, and its extensions
// after the commit: every round trip is a write and a read for this
// process and for Redis, and a hold made five of them. After a NOSCRIPT (a
// Redis that restarted or failed over) scripts are loaded and fill runs
// again, all of it: queue only calls that may run twice. Errors of single
// calls are read from their results; the error returned is the round
// trip's.
func pipelined(ctx context.Context, rdb redis.UniversalClient, scripts []*store.Script, fill func(p redis.Pipeliner)) error {
	run := func() error {
		p := rdb.Pipeline()
		fill(p)
		if p.Len() == 0 {
			return nil
		}
		_, err := p.Exec(ctx)
		return err
	}
	err := run()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		if err = store.Load(ctx, rdb, scripts...); err != nil {
			return fmt.Errorf("load scripts: %w", err)
		}
		err = run()
	}
	return err
}
