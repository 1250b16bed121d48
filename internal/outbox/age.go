package outbox

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// The age of the oldest unpublished event is the outbox's freshness: it
// grows when the relay stops, and the relay is exactly what may be gone
// (every worker down), so the age is read at scrape time by any process
// that has the outbox's database, not kept by the relay.

// oldestUnpublishedAge reads the oldest unpublished row through the relay's
// own partial index (one entry, where min(created_at) would read every
// unpublished row), aged by the database's clock so no process's clock
// skews it.
const oldestUnpublishedAge = `
SELECT GREATEST(0, extract(epoch FROM clock_timestamp() - created_at))::float8
FROM outbox WHERE published_at IS NULL ORDER BY id LIMIT 1`

// ageCollector exports the age at scrape time, bounded by a short timeout;
// a failed read exports nothing rather than a made-up value (an absent
// series is an alert of its own).
type ageCollector struct {
	pool *pgxpool.Pool
	desc *prometheus.Desc
}

// RegisterAgeMetric exports presenced_outbox_oldest_unpublished_age_seconds,
// read from pool at every scrape. Register it once per process.
func RegisterAgeMetric(reg prometheus.Registerer, pool *pgxpool.Pool) error {
	return reg.Register(&ageCollector{
		pool: pool,
		desc: prometheus.NewDesc("presenced_outbox_oldest_unpublished_age_seconds",
			"Age of the oldest unpublished outbox event (0 when none), read from the database at scrape time.", nil, nil),
	})
}

func (c *ageCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *ageCollector) Collect(ch chan<- prometheus.Metric) {
	age, err := c.age()
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, age)
}

func (c *ageCollector) age() (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var age float64
	err := c.pool.QueryRow(ctx, oldestUnpublishedAge).Scan(&age)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return age, err
}
