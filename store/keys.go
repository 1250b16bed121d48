package store

import "strings"

// Keyspace builds Redis keys and channel names under one deployment prefix.
//
// Every key of one entity (a hotel, a user, an event) carries the same hash
// tag, so a script touching several keys of that entity stays in one Redis
// Cluster slot, and so does its pub/sub channel.
type Keyspace struct {
	prefix string
}

// NewKeyspace returns a key builder whose keys all start with prefix.
func NewKeyspace(prefix string) Keyspace {
	return Keyspace{prefix: prefix}
}

// Prefix is the deployment prefix every key starts with.
func (k Keyspace) Prefix() string { return k.prefix }

// Entity returns the keys of one entity: prefix{kind:id}.
func (k Keyspace) Entity(kind, id string) EntityKeys {
	var b strings.Builder
	b.Grow(len(k.prefix) + len(kind) + len(id) + 3)
	b.WriteString(k.prefix)
	b.WriteByte('{')
	b.WriteString(kind)
	b.WriteByte(':')
	b.WriteString(id)
	b.WriteByte('}')
	return EntityKeys{base: b.String()}
}

// EntityKey is Entity(kind, id).Key(part) built in one allocation, for
// keys made by the thousand (a connect burst names followed users').
func (k Keyspace) EntityKey(kind, id, part string) string {
	var b strings.Builder
	b.Grow(len(k.prefix) + len(kind) + len(id) + len(part) + 4)
	b.WriteString(k.prefix)
	b.WriteByte('{')
	b.WriteString(kind)
	b.WriteByte(':')
	b.WriteString(id)
	b.WriteString("}:")
	b.WriteString(part)
	return b.String()
}

// Global returns keys that belong to no entity, tagged with name so that the
// keys of one global structure (a stream, a sorted set shard) share a slot.
func (k Keyspace) Global(name string) EntityKeys {
	return EntityKeys{base: k.prefix + "{" + name + "}"}
}

// EntityKeys builds the keys of one entity; all of them hash to one slot.
type EntityKeys struct {
	base string
}

// Key joins parts under the entity: prefix{kind:id}:part1:part2.
func (e EntityKeys) Key(parts ...string) string {
	n := len(e.base)
	for _, p := range parts {
		n += len(p) + 1
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(e.base)
	for _, p := range parts {
		b.WriteByte(':')
		b.WriteString(p)
	}
	return b.String()
}

// String is the entity's base key, usable as a key or channel itself.
func (e EntityKeys) String() string { return e.base }
