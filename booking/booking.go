// Package booking sells seats without ever selling one twice. PostgreSQL
// owns ownership (a partial unique index allows one live item per seat, a
// check ties a seat's state to its reservation); Redis only turns obvious
// contention into cheap rejections and serves seat-map snapshots.
//
// The module has one part per plane (module.go): holds, reservations and
// event administration (booking role), expiry (worker), seat maps and live
// invalidations (browse, read-only login). What the app and other modules
// may call is in api.go.
package booking

import (
	"github.com/presenced/presenced/store"
)

// keys builds booking's Redis keys; every key of one event shares its hash tag.
type keys struct{ ks store.Keyspace }

func (k keys) snapshot(event, scope string) string {
	return k.ks.Entity("event", event).Key("map", scope)
}
func (k keys) fillLease(event, scope string) string {
	return k.ks.Entity("event", event).Key("map", scope, "fill")
}
func (k keys) liveTopic(event, section string) string {
	return k.ks.Entity("event", event).Key("live", section)
}
func (k keys) livePause(event string) string {
	return k.ks.Entity("event", event).Key("live-paused")
}
func (k keys) holdRate(user string) string {
	return k.ks.Entity("user", user).Key("rl", "holds")
}

// allScope names the snapshot of a whole event.
const allScope = "_all"
