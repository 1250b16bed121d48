// Package faults holds the fault drills of presenced: a booking load while
// presenced, redis-server and PostgreSQL are killed or stopped
// (faults_test.go); a store connection cut mid-call (lost_test.go);
// network faults between a plane and its stores through an in-process
// toxiproxy (network_test.go); the clustered stores: a Redis Cluster
// failover, PgBouncer restarted, a switchover to a streaming replica,
// Redis persistence (stores_test.go); and the soak (soak_test.go). The
// sales of the newer drills record every client's operations and check
// the history of seat ownership with porcupine (seatmodel_test.go). It has
// no code of its own.
package faults
