package viewers

import (
	"strconv"
	"time"

	"github.com/presenced/presenced/store"
)

// keys builds the module's Redis keys. Every key of one hotel carries the
// hotel's hash tag, so the shards and buckets of a hotel live in one Redis
// Cluster slot and one PFCOUNT can union them.
type keys struct {
	ks store.Keyspace
}

func (k keys) hotel(id string) store.EntityKeys { return k.ks.Entity("hotel", id) }

// hll is the HyperLogLog of one (hotel, bucket, shard).
func (k keys) hll(hotel string, bucket int64, shard int) string {
	return k.hotel(hotel).Key("viewers", "hll", strconv.FormatInt(bucket, 10), strconv.Itoa(shard))
}

// window lists the keys a count unions: every shard of the current and the
// previous bucket.
func (k keys) window(hotel string, bucket int64, shards int) []string {
	out := make([]string, 0, 2*shards)
	for _, b := range []int64{bucket, bucket - 1} {
		for s := 0; s < shards; s++ {
			out = append(out, k.hll(hotel, b, s))
		}
	}
	return out
}

// topic is the pub/sub channel of a hotel's count.
func (k keys) topic(hotel string) string { return k.hotel(hotel).Key("viewers", "count") }

// publishLease elects the process that recounts a hotel for subscribers.
func (k keys) publishLease(hotel string) string { return k.hotel(hotel).Key("viewers", "publisher") }

// scratch is a short-lived key in the hotel's slot for merges.
func (k keys) scratch(hotel, token string) string {
	return k.hotel(hotel).Key("viewers", "scratch", token)
}

// prefixBucket is the global token bucket of an IP prefix.
func (k keys) prefixBucket(prefix string) string {
	return k.ks.Entity("viewers-prefix", prefix).Key("bucket")
}

// rates holds the per-hotel add counts ingest processes reported for one
// report interval.
func (k keys) rates(window int64) string {
	return k.ks.Global("viewers-rates").Key(strconv.FormatInt(window, 10))
}

// stream is one partition of the heartbeat metadata stream.
func (k keys) stream(partition int) string {
	return k.ks.Global("viewers-hb-" + strconv.Itoa(partition)).Key("stream")
}

// partitionLease names the scanner owning a stream partition.
func (k keys) partitionLease(partition int) string {
	return k.ks.Global("viewers-hb-" + strconv.Itoa(partition)).Key("owner")
}

// deadLetters receives stream entries that failed abuse_max_tries times.
func (k keys) deadLetters() string { return k.ks.Global("viewers-hb-dead").Key("stream") }

// scanners registers the live abuse scanners, for fair partition shares.
func (k keys) scanners() string { return k.ks.Global("viewers-scanners").Key("live") }

// bucketOf is the bucket number of t for buckets of length d.
func bucketOf(t time.Time, d time.Duration) int64 {
	return t.UnixNano() / int64(d)
}

// bucketExpiry is when the key of bucket b may go: after it served as the
// previous bucket, plus a little slack for clock skew between processes.
func bucketExpiry(b int64, d time.Duration) time.Time {
	return time.Unix(0, (b+2)*int64(d)+int64(d)/10)
}
