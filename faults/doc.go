// Package faults holds the fault-injection drills of presenced: a booking
// load run while presenced, redis-server and PostgreSQL are killed or
// stopped in turn (faults_test.go). It has no code of its own.
package faults
