package viewers

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/store"
)

// script is a store.Script that can also be queued in a pipeline by its
// SHA; a pipeline that meets NOSCRIPT loads the script everywhere and runs
// once more.
type script struct {
	*store.Script
	sha string
}

func newScript(name, src string) *script {
	return &script{Script: store.NewScript(name, src), sha: redis.NewScript(src).Hash()}
}

// pipelined runs fill on a fresh pipeline and executes it, loading the
// script and retrying once when Redis does not know it.
func (s *script) pipelined(ctx context.Context, rdb redis.UniversalClient, fill func(p redis.Pipeliner)) error {
	run := func() error {
		p := rdb.Pipeline()
		fill(p)
		_, err := p.Exec(ctx)
		return err
	}
	err := run()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		if err = store.Load(ctx, rdb, s.Script); err == nil {
			err = run()
		}
	}
	return err
}
