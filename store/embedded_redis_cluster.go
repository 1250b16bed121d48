package store

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCluster is a Redis Cluster started from the local redis-server for
// tests and for the split cluster on one machine: masters only, or each
// master with one replica (StartRedisClusterWithReplicas), which the
// cluster promotes when its master fails.
type RedisCluster struct {
	// Servers are every node, masters first, then replicas (node i+masters
	// replicates master i).
	Servers []*EmbeddedRedis
	Addrs   []string // host:port of each node, in the order of Servers
	masters int
	dir     string
}

// StartRedisCluster starts masters nodes under dir (one folder each),
// spreads the 16,384 slots evenly over them and waits up to converge for
// every node to report the cluster ok. On failure it stops what it started.
func StartRedisCluster(ctx context.Context, dir string, masters int, converge time.Duration) (*RedisCluster, error) {
	return startRedisCluster(ctx, dir, masters, 0, converge)
}

// StartRedisClusterWithReplicas is StartRedisCluster with one replica per
// master; it returns once every replica's link to its master is up.
func StartRedisClusterWithReplicas(ctx context.Context, dir string, masters int, converge time.Duration) (*RedisCluster, error) {
	return startRedisCluster(ctx, dir, masters, masters, converge)
}

func startRedisCluster(ctx context.Context, dir string, masters, replicas int, converge time.Duration) (*RedisCluster, error) {
	c := &RedisCluster{dir: dir, masters: masters}
	for i := 0; i < masters+replicas; i++ {
		if err := os.MkdirAll(c.nodeDir(i), 0o755); err != nil {
			c.Stop()
			return nil, err
		}
		srv, err := c.startNode(ctx, i, 0)
		if err != nil {
			c.Stop()
			return nil, fmt.Errorf("redis cluster node %d: %w", i, err)
		}
		c.Servers = append(c.Servers, srv)
		c.Addrs = append(c.Addrs, strings.TrimPrefix(srv.URL, "redis://"))
	}
	if err := joinCluster(ctx, c.Addrs, masters, converge); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.attachReplicas(ctx, converge); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// attachReplicas makes node masters+i a replica of master i and waits
// until each has synced.
func (c *RedisCluster) attachReplicas(ctx context.Context, converge time.Duration) error {
	deadline := time.Now().Add(converge)
	for i := c.masters; i < len(c.Addrs); i++ {
		m := redis.NewClient(&redis.Options{Addr: c.Addrs[i-c.masters]})
		id, err := m.ClusterMyID(ctx).Result()
		m.Close()
		if err != nil {
			return fmt.Errorf("redis cluster master %d id: %w", i-c.masters, err)
		}
		r := redis.NewClient(&redis.Options{Addr: c.Addrs[i]})
		for {
			// The replica must know the master's id first (gossip).
			err = r.ClusterReplicate(ctx, id).Err()
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			r.Close()
			return fmt.Errorf("redis cluster replica %d: %w", i, err)
		}
		for {
			info, err := r.Info(ctx, "replication").Result()
			if err == nil && strings.Contains(info, "master_link_status:up") {
				break
			}
			if time.Now().After(deadline) {
				r.Close()
				return fmt.Errorf("redis cluster replica %d did not sync: %v %s", i, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		r.Close()
	}
	return nil
}

// MasterOf returns the index of the node serving slot as a master now.
func (c *RedisCluster) MasterOf(ctx context.Context, slot int) (int, error) {
	for _, a := range c.Addrs {
		n := redis.NewClient(&redis.Options{Addr: a})
		shards, err := n.ClusterShards(ctx).Result()
		n.Close()
		if err != nil {
			continue // a node down: ask the next
		}
		for _, sh := range shards {
			if !shardServes(sh, slot) {
				continue
			}
			for _, node := range sh.Nodes {
				if node.Role != "master" || node.Health != "online" {
					continue
				}
				for j, b := range c.Addrs {
					if b == net.JoinHostPort(node.IP, strconv.FormatInt(node.Port, 10)) {
						return j, nil
					}
				}
			}
		}
	}
	return 0, fmt.Errorf("no node serves slot %d", slot)
}

func shardServes(sh redis.ClusterShard, slot int) bool {
	for _, r := range sh.Slots {
		if r.Start <= int64(slot) && int64(slot) <= r.End {
			return true
		}
	}
	return false
}

func (c *RedisCluster) nodeDir(i int) string { return filepath.Join(c.dir, strconv.Itoa(i)) }

func (c *RedisCluster) startNode(ctx context.Context, i, port int) (*EmbeddedRedis, error) {
	return StartRedisServer(ctx, RedisServerOptions{Port: port, Dir: c.nodeDir(i), Args: []string{
		"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "3000",
	}})
}

// RestartNode starts node i again on its port and folder: it rejoins with
// the same identity and slots (nodes.conf), its data gone (nothing is kept
// on disk).
func (c *RedisCluster) RestartNode(ctx context.Context, i int) error {
	_, p, err := net.SplitHostPort(c.Addrs[i])
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return err
	}
	srv, err := c.startNode(ctx, i, port)
	if err != nil {
		return fmt.Errorf("restart redis cluster node %d: %w", i, err)
	}
	c.Servers[i] = srv
	return nil
}

// Stop stops every node.
func (c *RedisCluster) Stop() {
	for _, s := range c.Servers {
		_ = s.Stop()
	}
}

// URL is the cluster's seed URL (redis://a?addr=b&addr=c).
func (c *RedisCluster) URL() string { return RedisClusterURL(c.Addrs) }

// RedisClusterURL is the seed URL go-redis parses for nodes at addrs.
func RedisClusterURL(addrs []string) string {
	u := "redis://" + addrs[0]
	for i, a := range addrs[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + a
	}
	return u
}

// joinCluster spreads the slots over the first masters nodes and makes
// every node meet.
func joinCluster(ctx context.Context, addrs []string, masters int, converge time.Duration) error {
	nodes := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		nodes[i] = redis.NewClient(&redis.Options{Addr: a})
		defer nodes[i].Close()
	}
	const slots = 16384
	for i, n := range nodes[:masters] {
		lo, hi := i*slots/masters, (i+1)*slots/masters-1
		if err := n.ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			return fmt.Errorf("assign slots %d-%d: %w", lo, hi, err)
		}
	}
	for _, a := range addrs[1:] {
		host, port, _ := strings.Cut(a, ":")
		if err := nodes[0].ClusterMeet(ctx, host, port).Err(); err != nil {
			return fmt.Errorf("cluster meet %s: %w", a, err)
		}
	}
	known := "cluster_known_nodes:" + strconv.Itoa(len(addrs))
	deadline := time.Now().Add(converge)
	for _, n := range nodes {
		for {
			info, err := n.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, known) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("redis cluster did not converge: %v %s", err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}
