// Package presence tracks who is online: per-user online / idle / offline
// and manual statuses (busy, away, ...), aggregated over every device of a
// user, pushed live to the users allowed to see them.
//
// The parts:
//
//   - the gateway (WebSocket /v1/presence/ws): one connection is one session
//     of one device. It registers the session, relays activity, subscription
//     changes and manual statuses to Redis, and fans status changes out to
//     the connections that follow a user: at once to an idle connection,
//     coalesced (the latest per user) behind a write in flight;
//   - the read API (GET /v1/presence/users/{id}, POST /v1/presence/query)
//     and the contact lists of the "contacts" policy (PostgreSQL);
//   - the session lifecycle (worker role): pings flow through a stream per
//     shard into a deadlines index (a session's first is recorded there
//     directly as it opens); a scheduler turns passed deadlines into
//     inactive events; a cleanup consumer ends those sessions. A gateway that
//     dies therefore cannot leave its users online: their sessions expire
//     within the session TTL plus one scheduler period.
//
// Redis holds all live state. Every key of one user shares the user's hash
// tag, so one Lua call changes a session, recomputes the user's status and
// publishes the change atomically; lifecycle keys share their shard's tag.
// See docs/presence.md for the protocol.
package presence
