package presence

import (
	"testing"
	"time"
)

// BenchmarkMessageBucket is the per-connection message budget every
// client frame takes a token from (one goroutine per connection).
func BenchmarkMessageBucket(b *testing.B) {
	bk := newBucket(1000, 50)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		bk.allow(time.Now().UnixNano())
	}
}
