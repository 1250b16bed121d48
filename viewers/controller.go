package viewers

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/store"
)

// ratesSentinel is a member every rate report adds, so the controller can
// tell "no hotel was busy" from "no ingest process reported" (hotel ids
// never contain '~').
const ratesSentinel = "~"

// reportRates sends, at the end of every rate_report_interval, the adds per
// hotel this process flushed during it. Only hotels that could matter are
// reported (busy ones, and hot ones that may be going quiet), so the report
// stays small however many hotels there are.
func (mod *Module) reportRates(ctx context.Context) error {
	every := int64(mod.cfg.RateReportInterval)
	floor := int64(mod.cfg.Promote16Rate / 50 * mod.cfg.RateReportInterval.Seconds())
	for {
		now := time.Now().UnixNano()
		next := (now/every + 1) * every
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Duration(next - now)):
		}
		window := next/every - 1
		rates := mod.writer.takeRates()
		rctx, cancel := context.WithTimeout(ctx, mod.cfg.RateReportInterval)
		key := mod.keys.rates(window)
		pipe := mod.rdb.Pipeline()
		n := 0
		for hotel, adds := range rates {
			if adds >= max(floor, 1) || mod.tiers.get(hotel).hot() {
				pipe.ZIncrBy(rctx, key, float64(adds), hotel)
				n++
			}
		}
		pipe.ZIncrBy(rctx, key, 1, ratesSentinel)
		pipe.Expire(rctx, key, 10*mod.cfg.RateReportInterval)
		if _, err := pipe.Exec(rctx); err != nil && ctx.Err() == nil {
			mod.log.Debug("viewers: rate report failed", "err", err)
		}
		mod.m.redisCommands.WithLabelValues("rates").Add(float64(n + 2))
		cancel()
	}
}

// controller moves hot hotels between 1, 16 and 64 shards. One leader at a
// time (a PostgreSQL advisory lock) runs a step every controller_interval;
// its state lives in viewers_hotel_tiers, so a new leader continues where
// the last one stopped. A promotion raises the read tier at once and the
// write tier after write_delay (longer than the processes' tier cache), so
// no process writes a shard that some reader does not read yet. A
// demotion lowers writers first and readers after write_delay plus two
// buckets, when the upper shards' keys have expired.
type controller struct {
	db   *pgxpool.Pool
	rdb  redis.UniversalClient
	keys keys
	cfg  config.Viewers
	m    *metrics
	log  *slog.Logger
}

func (c *controller) run(ctx context.Context) error {
	var lock *store.AdvisoryLock
	defer func() {
		if lock != nil {
			lock.Release()
			c.m.leader.Set(0)
		}
	}()
	t := time.NewTicker(c.cfg.ControllerInterval)
	defer t.Stop()
	for {
		switch {
		case lock == nil:
			l, err := store.TryAdvisoryLock(ctx, c.db, "viewers-controller")
			if err != nil && ctx.Err() == nil {
				c.log.Warn("viewers: controller lock", "err", err)
			}
			if l != nil {
				lock = l
				c.m.leader.Set(1)
				c.log.Info("viewers: leading the hot-hotel controller")
			}
		case !lock.Alive(ctx):
			lock.Release()
			lock = nil
			c.m.leader.Set(0)
		}
		if lock != nil {
			if err := c.step(ctx, time.Now()); err != nil && ctx.Err() == nil {
				c.log.Warn("viewers: controller step failed", "err", err)
			}
			c.m.leaderSince.Set(float64(time.Now().Unix()))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// rates reads the adds/s per hotel of the last complete report window.
func (c *controller) rates(ctx context.Context, now time.Time) (map[string]float64, bool, error) {
	every := int64(c.cfg.RateReportInterval)
	w := now.UnixNano()/every - 1
	if now.UnixNano()%every < every/2 {
		w-- // reports of the window that just ended may still be arriving
	}
	zs, err := c.rdb.ZRangeWithScores(ctx, c.keys.rates(w), 0, -1).Result()
	if err != nil {
		return nil, false, fmt.Errorf("read rates: %w", err)
	}
	out := make(map[string]float64, len(zs))
	seen := false
	for _, z := range zs {
		h, _ := z.Member.(string)
		if h == ratesSentinel {
			seen = true
			continue
		}
		out[h] = z.Score / c.cfg.RateReportInterval.Seconds()
	}
	return out, seen, nil
}

// needed is the tier a rate calls for.
func (c *controller) needed(rate float64) int {
	switch {
	case rate >= c.cfg.Promote64Rate:
		return 64
	case rate >= c.cfg.Promote16Rate:
		return 16
	}
	return 1
}

func (c *controller) step(ctx context.Context, now time.Time) error {
	if err := c.finishSteps(ctx); err != nil {
		return err
	}
	rates, seen, err := c.rates(ctx, now)
	if err != nil {
		return err
	}
	if !seen {
		// No ingest process reported: idle or blind, we cannot tell, and
		// acting on no data could demote a hotel under load.
		c.m.ratesMissing.Inc()
		return nil
	}
	for hotel, rate := range rates {
		if need := c.needed(rate); need > 1 && validHotel(hotel) {
			if err := c.promote(ctx, hotel, need, rate); err != nil {
				return err
			}
		}
	}
	return c.watchQuiet(ctx, rates, now)
}

// finishSteps takes the second phase of tier changes whose delay passed.
func (c *controller) finishSteps(ctx context.Context) error {
	rows, err := c.db.Query(ctx, `UPDATE viewers_hotel_tiers
		SET write_tier = target_tier, next_step_at = NULL, changed_at = now()
		WHERE next_step_at <= now() AND target_tier > write_tier AND read_tier = target_tier
		RETURNING hotel_id`)
	if err != nil {
		return fmt.Errorf("finish promotions: %w", err)
	}
	n, err := countRows(rows)
	if err != nil {
		return fmt.Errorf("finish promotions: %w", err)
	}
	c.m.tierChanges.WithLabelValues("promote", "write").Add(float64(n))
	rows, err = c.db.Query(ctx, `UPDATE viewers_hotel_tiers
		SET read_tier = target_tier, next_step_at = NULL, changed_at = now()
		WHERE next_step_at <= now() AND target_tier < read_tier AND write_tier = target_tier
		RETURNING hotel_id`)
	if err != nil {
		return fmt.Errorf("finish demotions: %w", err)
	}
	n, err = countRows(rows)
	if err != nil {
		return fmt.Errorf("finish demotions: %w", err)
	}
	c.m.tierChanges.WithLabelValues("demote", "read").Add(float64(n))
	return nil
}

func countRows(rows interface {
	Next() bool
	Err() error
	Close()
}) (int, error) {
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
	}
	return n, rows.Err()
}

// promote raises a hotel's read tier to need now and schedules writers.
func (c *controller) promote(ctx context.Context, hotel string, need int, rate float64) error {
	tag, err := c.db.Exec(ctx, `INSERT INTO viewers_hotel_tiers
			(hotel_id, read_tier, write_tier, target_tier, next_step_at, last_rate)
		VALUES ($1, $2, 1, $2, now() + $3::interval, $4)
		ON CONFLICT (hotel_id) DO UPDATE SET
			read_tier = GREATEST(viewers_hotel_tiers.read_tier, EXCLUDED.target_tier),
			target_tier = EXCLUDED.target_tier,
			next_step_at = CASE WHEN viewers_hotel_tiers.write_tier = EXCLUDED.target_tier
				AND viewers_hotel_tiers.read_tier = EXCLUDED.target_tier THEN NULL ELSE now() + $3::interval END,
			quiet_since = NULL, last_rate = EXCLUDED.last_rate, changed_at = now()
		WHERE viewers_hotel_tiers.target_tier < EXCLUDED.target_tier`,
		hotel, need, durationSQL(c.cfg.WriteDelay), rate)
	if err != nil {
		return fmt.Errorf("promote %s: %w", hotel, err)
	}
	if tag.RowsAffected() > 0 {
		c.m.tierChanges.WithLabelValues("promote", "read").Inc()
		c.log.Info("viewers: promoting a hot hotel", "hotel", hotel, "tier", need, "rate", rate, "writers_after", c.cfg.WriteDelay)
	}
	return nil
}

// watchQuiet demotes settled hot hotels that stayed quiet for quiet_period.
func (c *controller) watchQuiet(ctx context.Context, rates map[string]float64, now time.Time) error {
	rows, err := c.db.Query(ctx, `SELECT hotel_id, read_tier, quiet_since FROM viewers_hotel_tiers
		WHERE read_tier > 1 AND next_step_at IS NULL`)
	if err != nil {
		return fmt.Errorf("read hot hotels: %w", err)
	}
	type hot struct {
		hotel string
		tier  int16
		quiet *time.Time
	}
	var hots []hot
	for rows.Next() {
		var h hot
		if err := rows.Scan(&h.hotel, &h.tier, &h.quiet); err != nil {
			rows.Close()
			return fmt.Errorf("read hot hotels: %w", err)
		}
		hots = append(hots, h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read hot hotels: %w", err)
	}
	for _, h := range hots {
		threshold := c.cfg.Promote16Rate
		lower := 1
		if h.tier == 64 {
			threshold, lower = c.cfg.Promote64Rate, 16
		}
		rate := rates[h.hotel]
		quiet := rate < c.cfg.DemoteRatio*threshold
		switch {
		case !quiet && h.quiet != nil:
			_, err = c.db.Exec(ctx, `UPDATE viewers_hotel_tiers SET quiet_since = NULL, last_rate = $2 WHERE hotel_id = $1`, h.hotel, rate)
		case quiet && h.quiet == nil:
			_, err = c.db.Exec(ctx, `UPDATE viewers_hotel_tiers SET quiet_since = now(), last_rate = $2 WHERE hotel_id = $1`, h.hotel, rate)
		case quiet && now.Sub(*h.quiet) >= c.cfg.QuietPeriod:
			err = c.demote(ctx, h.hotel, int(h.tier), lower, rate)
		}
		if err != nil {
			return fmt.Errorf("watch %s: %w", h.hotel, err)
		}
	}
	return nil
}

func (c *controller) demote(ctx context.Context, hotel string, from, to int, rate float64) error {
	readersAfter := c.cfg.WriteDelay + 2*c.cfg.Bucket
	tag, err := c.db.Exec(ctx, `UPDATE viewers_hotel_tiers SET
			write_tier = $3, target_tier = $3, next_step_at = now() + $4::interval,
			quiet_since = NULL, last_rate = $5, changed_at = now()
		WHERE hotel_id = $1 AND read_tier = $2 AND write_tier = $2 AND next_step_at IS NULL`,
		hotel, from, to, durationSQL(readersAfter), rate)
	if err != nil {
		return err
	}
	if tag.RowsAffected() > 0 {
		c.m.tierChanges.WithLabelValues("demote", "write").Inc()
		c.log.Info("viewers: demoting a quiet hotel", "hotel", hotel, "from", from, "to", to, "readers_after", readersAfter)
	}
	return nil
}

// durationSQL renders d as a PostgreSQL interval literal.
func durationSQL(d time.Duration) string {
	return strconv.FormatInt(d.Microseconds(), 10) + " microseconds"
}
