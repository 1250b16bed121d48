package viewers

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
)

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

type cfgViewers = config.Viewers

func newTestRedis(t testing.TB) *redis.Client {
	opt, err := redis.ParseURL(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// requireNear checks a HyperLogLog estimate is within 2 % of the truth.
func requireNear(t testing.TB, want int, got int64) {
	t.Helper()
	off := math.Abs(float64(got) - float64(want))
	errPct := 100 * off / float64(want)
	// Below 50 sessions one session is already over 2 %: there a count one
	// off (two sessions sharing an HLL register) is within the estimate.
	if errPct > 2 && off > 1 {
		t.Fatalf("count %d is %.2f%% off the true %d (limit 2%%)", got, errPct, want)
	}
}
