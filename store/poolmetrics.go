package store

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// RegisterPoolMetrics exports a pool's connection counts and waits, labelled
// by its purpose, so "pool in use / waiting" is visible per plane.
func RegisterPoolMetrics(reg prometheus.Registerer, purpose string, pool *pgxpool.Pool) error {
	labels := prometheus.Labels{"pool": purpose}
	gauge := func(name, help string, f func(*pgxpool.Stat) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return f(pool.Stat()) })
	}
	counter := func(name, help string, f func(*pgxpool.Stat) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return f(pool.Stat()) })
	}
	for _, c := range []prometheus.Collector{
		gauge("presenced_postgres_pool_acquired_connections", "Connections in use.",
			func(s *pgxpool.Stat) float64 { return float64(s.AcquiredConns()) }),
		gauge("presenced_postgres_pool_idle_connections", "Idle connections.",
			func(s *pgxpool.Stat) float64 { return float64(s.IdleConns()) }),
		gauge("presenced_postgres_pool_max_connections", "Pool size limit.",
			func(s *pgxpool.Stat) float64 { return float64(s.MaxConns()) }),
		counter("presenced_postgres_pool_empty_acquires_total", "Acquires that had to wait for a connection.",
			func(s *pgxpool.Stat) float64 { return float64(s.EmptyAcquireCount()) }),
		counter("presenced_postgres_pool_empty_acquire_wait_seconds_total", "Time acquires spent waiting because the pool was exhausted.",
			func(s *pgxpool.Stat) float64 { return s.EmptyAcquireWaitTime().Seconds() }),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
