// Package socket is presenced's WebSocket and SSE stack: the upgrade, the
// frame reader (gorilla's frame code, forked: wsconn_gorilla.go) with
// idle connections parked in one epoll set instead of a goroutine each,
// per-connection send queues and write pumps, SSE streams, and the drain
// of every live connection at shutdown. Modules get a Sockets from their
// host and read and write their connections through Conn.
package socket
