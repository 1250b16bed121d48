package presence

import (
	"strings"
	"testing"
)

func TestRedisWorkPerUnit(t *testing.T) {
	before := parseCommandStats("# Commandstats\r\ncmdstat_evalsha:calls=10,usec=100,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\ncmdstat_info:calls=3,usec=30\r\n")
	after := parseCommandStats("# Commandstats\r\ncmdstat_evalsha:calls=30,usec=500,usec_per_call=16.67,rejected_calls=0,failed_calls=0\r\ncmdstat_publish:calls=20,usec=40\r\ncmdstat_info:calls=5,usec=50\r\n")
	got := redisWork(before, after, 20, "change")
	want := "2 commands and 22 us of command time per change (evalsha 1×20us, publish 1×2us)"
	if got != want {
		t.Fatalf("redisWork = %q, want %q", got, want)
	}
	if got := redisWork(nil, after, 20, "change"); got != "n/a" {
		t.Fatalf("unread before: %q", got)
	}
	if !strings.Contains(redisWork(before, before, 1, "second"), "0 commands") {
		t.Fatal("no work must read as zero commands")
	}
}
