package presence

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/web/socket"
	"github.com/presenced/presenced/web/wire"
)

// Gateway liveness: a gateway that dies (SIGKILL, a lost machine) cannot
// say goodbye, and its sessions would stay online until their ping TTL
// (minutes). So each gateway holds a lease it renews every
// gateway_lease/5, and records which sessions it serves, per lifecycle
// shard. When a lease lapses, a worker ends that gateway's sessions at
// once; the same users' sessions on other gateways are not touched.

var (
	//go:embed lua/gw_lease.lua
	gwLeaseLua string
	//go:embed lua/gw_claim.lua
	gwClaimLua string
	//go:embed lua/gw_reap.lua
	gwReapLua string

	gwLeaseScript = store.NewScript("presence_gw_lease", gwLeaseLua)
	gwClaimScript = store.NewScript("presence_gw_claim", gwClaimLua)
	gwReapScript  = store.NewScript("presence_gw_reap", gwReapLua)
)

// reclaimAfter: a worker that claimed a gateway and died before reaping it
// leaves the claim to be taken again after this.
const reclaimAfter = 30 * time.Second

// lease runs the gateway's lease: registered before the gateway serves,
// renewed until ctx ends, then released so its leftovers are reaped.
type lease struct {
	g   *gateway
	ttl time.Duration
}

func (l *lease) call(ctx context.Context, mode string) (bool, error) {
	m := l.g.mod
	gk := m.keys.gateways()
	n, err := gwLeaseScript.Run(ctx, m.rdb, []string{gk.leases, gk.reaped}, m.id, l.ttl.Milliseconds(), mode).Int()
	if err != nil {
		return false, fmt.Errorf("presence: gateway lease %s: %w", mode, err)
	}
	if n == 2 {
		m.log.Warn("presence: gateway lease was gone (Redis lost its data?); taken again")
	}
	return n != 0, nil
}

// register takes the lease before the first connection is accepted.
func (l *lease) register(ctx context.Context) error {
	for {
		_, err := l.call(ctx, "register")
		if err == nil || ctx.Err() != nil {
			return err
		}
		l.g.mod.log.Warn("presence: register gateway lease; retrying", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// run renews the lease every ttl/5. A renewal that finds the lease reaped
// (the gateway stalled past its ttl: its sessions were ended) closes every
// connection with 1012, so clients come back with live sessions instead of
// sitting on ended ones, and registers again.
func (l *lease) run(ctx context.Context) {
	t := time.NewTicker(l.ttl / 5)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			if _, err := l.call(rctx, "release"); err != nil {
				l.g.mod.log.Warn("presence: release gateway lease", "err", err)
			}
			cancel()
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, l.ttl/2)
		ok, err := l.call(rctx, "renew")
		cancel()
		switch {
		case err != nil:
			l.g.mod.log.Warn("presence: renew gateway lease", "err", err)
		case !ok:
			l.g.mod.log.Error("presence: this gateway's lease lapsed and its sessions were ended; reconnecting its clients")
			l.g.m.leaseLost.Inc()
			l.g.reconnectAll()
			if err := l.register(ctx); err != nil && ctx.Err() == nil {
				l.g.mod.log.Warn("presence: register gateway lease", "err", err)
			}
		}
	}
}

// reconnectAll closes every connection of this gateway with 1012 and a
// jittered reconnect delay.
func (g *gateway) reconnectAll() {
	g.f.mu.Lock()
	users := make([]*localUser, 0, len(g.f.users))
	for _, lu := range g.f.users {
		users = append(users, lu)
	}
	g.f.mu.Unlock()
	for _, lu := range users {
		for _, c := range lu.clientList() {
			c.conn.Close(socket.CloseServiceRestart, fmt.Sprintf(`{"reconnectMs":%d}`, wire.Jitter(2*time.Second).Milliseconds()))
		}
	}
}

// reapGateways ends the sessions of every gateway whose lease lapsed. Safe
// in several workers: claiming is atomic, and each shard's reap empties the
// set it reads in the same step.
func (m *Module) reapGateways(ctx context.Context) error {
	gk := m.keys.gateways()
	ids, err := gwClaimScript.Run(ctx, m.rdb, []string{gk.leases, gk.reaping, gk.reaped}, reclaimAfter.Milliseconds()).StringSlice()
	if err != nil {
		return fmt.Errorf("presence: claim lapsed gateways: %w", err)
	}
	for _, id := range ids {
		ended := int64(0)
		for n := 0; n < m.cfg.Shards; n++ {
			sk := m.keys.shard(n)
			c, err := gwReapScript.Run(ctx, m.rdb, []string{sk.gateway(id), sk.deadlines, sk.closing, sk.events}, m.cfg.EventsMaxLen).Int64()
			if err != nil {
				return fmt.Errorf("presence: reap gateway %s: %w", id, err)
			}
			ended += c
		}
		m.m.expired.WithLabelValues("gateway").Add(float64(ended))
		if err := m.rdb.ZRem(ctx, gk.reaping, id).Err(); err != nil && err != redis.Nil {
			return fmt.Errorf("presence: reap gateway %s: %w", id, err)
		}
		m.log.Warn("presence: gateway lease lapsed; its sessions were ended", "gateway", id, "sessions", ended)
	}
	return nil
}
