package store

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/config"
)

// OpenRedis connects to a single node or, with cfg.Cluster, a Redis Cluster.
// Both are returned as a UniversalClient so callers never care which.
func OpenRedis(cfg config.Redis) (redis.UniversalClient, error) {
	if cfg.URL == "" {
		return nil, fmt.Errorf("redis: no url")
	}
	if cfg.Cluster {
		opt, err := redis.ParseClusterURL(cfg.URL)
		if err != nil {
			return nil, fmt.Errorf("redis: parse cluster url: %w", redactErr(err, cfg.URL))
		}
		opt.PoolSize = cfg.PoolSize
		opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = cfg.DialTimeout, cfg.ReadTimeout, cfg.WriteTimeout
		return redis.NewClusterClient(opt), nil
	}
	opt, err := redis.ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("redis: parse url: %w", redactErr(err, cfg.URL))
	}
	opt.PoolSize = cfg.PoolSize
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = cfg.DialTimeout, cfg.ReadTimeout, cfg.WriteTimeout
	return redis.NewClient(opt), nil
}

// PingRedis answers whether Redis (every primary, on a cluster) responds.
func PingRedis(ctx context.Context, c redis.UniversalClient) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return node.Ping(ctx).Err()
		})
	}
	return c.Ping(ctx).Err()
}

// IsCluster tells whether c talks to a Redis Cluster.
func IsCluster(c redis.UniversalClient) bool {
	_, ok := c.(*redis.ClusterClient)
	return ok
}
