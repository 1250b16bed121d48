package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// The browse plane's read-only pool may point at a streaming replica. Its
// reads are then as old as the replica's replay: a seat map refilled from
// a lagging replica shows holds late (never grants one: holds are decided
// on the primary). The lag is exported so it can be watched and alerted on.

// replicaLagSQL is 0 on a primary and on a replica that has replayed all
// it received, else the age of the last transaction it replayed. (A
// replica cut off from its primary that replayed everything also reads 0:
// presenced_postgres_replica_receiving says whether WAL still arrives.)
const replicaLagSQL = `
SELECT pg_is_in_recovery(),
       CASE WHEN NOT pg_is_in_recovery() THEN 0
            WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0
            ELSE GREATEST(0, extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp()))
       END::float8,
       pg_last_wal_receive_lsn() IS NOT NULL`

// replicaCollector reads the lag at scrape time, bounded by a short
// timeout; a failed read exports nothing rather than a made-up value.
type replicaCollector struct {
	pool      *pgxpool.Pool
	recovery  *prometheus.Desc
	lag       *prometheus.Desc
	receiving *prometheus.Desc
}

// RegisterReplicaMetrics exports whether the pool's server is a replica and
// how far its replay lags, labelled by the pool's purpose.
func RegisterReplicaMetrics(reg prometheus.Registerer, purpose string, pool *pgxpool.Pool) error {
	labels := prometheus.Labels{"pool": purpose}
	return reg.Register(&replicaCollector{
		pool: pool,
		recovery: prometheus.NewDesc("presenced_postgres_in_recovery",
			"1 when the pool's server is a streaming replica (in recovery), 0 on a primary.", nil, labels),
		lag: prometheus.NewDesc("presenced_postgres_replica_lag_seconds",
			"Age of the last transaction the pool's replica replayed while WAL remains to replay; 0 when caught up or on a primary.", nil, labels),
		receiving: prometheus.NewDesc("presenced_postgres_replica_receiving",
			"1 when the pool's replica has received WAL from a primary (0 on a primary).", nil, labels),
	})
}

func (c *replicaCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.recovery
	ch <- c.lag
	ch <- c.receiving
}

func (c *replicaCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var inRecovery, receiving bool
	var lag float64
	if err := c.pool.QueryRow(ctx, replicaLagSQL).Scan(&inRecovery, &lag, &receiving); err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.recovery, prometheus.GaugeValue, boolFloat(inRecovery))
	ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, lag)
	ch <- prometheus.MustNewConstMetric(c.receiving, prometheus.GaugeValue, boolFloat(inRecovery && receiving))
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
