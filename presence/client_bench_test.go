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

// The bucket starts full, refuses past its burst and refills at its rate.
func TestMessageBucket(t *testing.T) {
	bk := newBucket(10, 3)
	now := time.Unix(1_900_000_000, 0).UnixNano()
	for i := 0; i < 3; i++ {
		if !bk.allow(now) {
			t.Fatalf("burst %d refused", i)
		}
	}
	if bk.allow(now) || bk.allow(now+int64(50*time.Millisecond)) {
		t.Fatal("over the burst, or before a token came back")
	}
	if !bk.allow(now + int64(100*time.Millisecond)) {
		t.Fatal("a token a tenth of a second")
	}
}
