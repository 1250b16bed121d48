package presence

import (
	"hash/fnv"
	"strconv"

	"github.com/presenced/presenced/store"
)

// keys names the module's Redis keys. A user's keys share the tag
// {presence:<user>}; a lifecycle shard's share {presence-shard:<n>}.
type keys struct {
	ks     store.Keyspace
	shards int
	// byShard holds every shard's key names, built once: each session
	// open, ping and close names its shard's keys.
	byShard []shardKeys
}

func newKeys(ks store.Keyspace, shards int) keys {
	k := keys{ks: ks, shards: shards}
	k.byShard = make([]shardKeys, shards)
	for n := range k.byShard {
		k.byShard[n] = k.shardNames(n)
	}
	return k
}

type userKeys struct {
	status    string // HASH s, m, since, v, la
	sessions  string // HASH sid -> "<lastActiveMs>|<a|i>"
	subs      string // SET of users this user follows (forward)
	followers string // SET of users following this user (reverse)
	notify    string // SET of users waiting for this user to come online
	waiting   string // SET of users this user waits for (one-time notifications)
	rooms     string // SET of rooms from this user's latest token
	channel   string // pub/sub channel of status changes
}

// Parts of a user's key names.
const (
	partStatus    = "status"
	partSessions  = "sessions"
	partSubs      = "subs"
	partNotify    = "notify"
	partFollowers = "followers"
	partRooms     = "rooms"
	partChannel   = "updates"
	// partPrivacy is a HASH of the user's privacy choices (inv "1" while
	// invisible). It has no expiry: the choices outlive the sessions.
	partPrivacy = "privacy"
)

// userEntity is the hash tag every key of user id shares.
func (k keys) userEntity(id string) store.EntityKeys {
	return k.ks.Entity("presence", id)
}

func (k keys) user(id string) userKeys {
	e := k.userEntity(id)
	return userKeys{
		status:    e.Key(partStatus),
		sessions:  e.Key(partSessions),
		subs:      e.Key(partSubs),
		followers: e.Key(partFollowers),
		notify:    e.Key(partNotify),
		waiting:   e.Key("waiting"),
		rooms:     e.Key(partRooms),
		channel:   e.Key(partChannel),
	}
}

// userKey is one key of a user, for loops over many users (a connect's
// follows, a snapshot): user builds all eight, nine allocations per user.
func (k keys) userKey(id, part string) string {
	return k.ks.EntityKey("presence", id, part)
}

type shardKeys struct {
	pings     string // STREAM of pings and closes: m, t (ttl ms), k (p|c)
	deadlines string // ZSET member -> deadline ms, live sessions
	closing   string // ZSET member -> end of the close grace ms, closed sessions
	events    string // STREAM of inactive events: m, r (reason), d
	changes   string // STREAM of status changes for webhooks
	dead      string // STREAM of dead-lettered entries
	control   string // pub/sub channel of control messages for users of the shard
	entity    store.EntityKeys
}

// gateway is the SET of members (sessions) gateway id serves in the shard.
func (s shardKeys) gateway(id string) string { return s.entity.Key("gw", id) }

// gatewayKeys hold the gateways' liveness leases, under one hash tag.
type gatewayKeys struct {
	leases  string // ZSET gateway id -> lease expiry ms
	reaping string // ZSET gateway id -> claim ms, while a worker reaps it
	reaped  string // ZSET gateway id -> ms: reaped lately, for its late renewal
}

// visibilityEpoch counts the changes of who may see whom (visibility
// settings, contact lists, rooms): one key, read twice by each connect
// naming subscriptions and written once per change.
func (k keys) visibilityEpoch() string {
	return k.ks.Entity("presence-visibility", "all").Key("epoch")
}

func (k keys) gateways() gatewayKeys {
	e := k.ks.Entity("presence-gw", "all")
	return gatewayKeys{leases: e.Key("leases"), reaping: e.Key("reaping"), reaped: e.Key("reaped")}
}

func (k keys) shard(n int) shardKeys {
	if n >= 0 && n < len(k.byShard) {
		return k.byShard[n]
	}
	return k.shardNames(n)
}

func (k keys) shardNames(n int) shardKeys {
	e := k.ks.Entity("presence-shard", strconv.Itoa(n))
	return shardKeys{
		pings:     e.Key("pings"),
		deadlines: e.Key("deadlines"),
		closing:   e.Key("closing"),
		events:    e.Key("events"),
		changes:   e.Key("changes"),
		dead:      e.Key("dead"),
		control:   e.Key("control"),
		entity:    e,
	}
}

// shardOf places a user in a lifecycle shard by a stable hash.
func (k keys) shardOf(user string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(user))
	return int(h.Sum32() % uint32(k.shards))
}
