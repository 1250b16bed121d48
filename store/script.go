package store

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Script is an embedded Lua script. Run sends EVALSHA and falls back to EVAL
// when the server has not seen the script yet (NOSCRIPT), so a restarted or
// failed-over Redis needs no warm-up.
type Script struct {
	name string
	s    *redis.Script
}

// NewScript wraps Lua source, usually a //go:embed string of a .lua file.
func NewScript(name, src string) *Script {
	return &Script{name: name, s: redis.NewScript(src)}
}

// Name is the script's name for logs and errors.
func (s *Script) Name() string { return s.name }

// Run executes the script. In Redis Cluster every key must share one hash
// tag; the call is routed by the first key.
func (s *Script) Run(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	return s.s.Run(ctx, c, keys, args...)
}

// Queue adds the script to a pipeline by its SHA. Run the pipeline with
// Pipelined, which loads the script when Redis does not know it.
func (s *Script) Queue(ctx context.Context, p redis.Pipeliner, keys []string, args ...any) *redis.Cmd {
	return p.EvalSha(ctx, s.s.Hash(), keys, args...)
}

// QueueSource adds the script to a pipeline with its source (EVAL): longer
// than Queue, but it runs on a Redis that does not know the script (and
// teaches it), so calls refused with NOSCRIPT can be sent again together.
func (s *Script) QueueSource(ctx context.Context, p redis.Pipeliner, keys []string, args ...any) *redis.Cmd {
	return s.s.Eval(ctx, p, keys, args...)
}

// Pipelined runs fill on a fresh pipeline and executes it; when Redis
// answers NOSCRIPT it loads the script everywhere and runs once more (see
// the package function Pipelined).
func (s *Script) Pipelined(ctx context.Context, rdb redis.UniversalClient, fill func(p redis.Pipeliner)) error {
	return Pipelined(ctx, rdb, []*Script{s}, fill)
}

// Pipelined runs the calls fill queues in one round trip (one per node of
// a Cluster). The keys of one queued call share a hash tag; different
// calls need not. When Redis answers NOSCRIPT it loads scripts everywhere
// and runs fill once more. The retry runs every call again, also those
// that had succeeded, so queue only calls that may run twice (a renewal,
// or a debit that may be taken twice after a Redis restart). Errors of
// single calls are read from their results; the error returned is the
// round trip's.
func Pipelined(ctx context.Context, rdb redis.UniversalClient, scripts []*Script, fill func(p redis.Pipeliner)) error {
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
		if err = Load(ctx, rdb, scripts...); err == nil {
			err = run()
		}
	}
	return err
}

// Load sends SCRIPT LOAD to every primary, so the first calls after start do
// not pay for the NOSCRIPT round trip.
func Load(ctx context.Context, c redis.UniversalClient, scripts ...*Script) error {
	load := func(ctx context.Context, node redis.Scripter) error {
		for _, s := range scripts {
			if err := s.s.Load(ctx, node).Err(); err != nil {
				return fmt.Errorf("load script %s: %w", s.name, err)
			}
		}
		return nil
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return load(ctx, node)
		})
	}
	return load(ctx, c)
}
