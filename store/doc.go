// Package store connects presenced to its stores: Redis (single node or
// Cluster, a Lua script runner, a hash-tagged key builder, owner-checked
// leases) and PostgreSQL (pools per purpose, advisory locks, embedded
// numbered migrations), and starts the development stores of a
// zero-config process (a private redis-server or an in-process Redis, and
// a private PostgreSQL from the local server binaries).
package store
