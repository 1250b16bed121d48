package presence_test

import (
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"
)

// GET /v1/presence/users/{id} end to end: JWT check, policy, Redis read.
func BenchmarkReadAPIUser(b *testing.B) {
	s := startServer(b, testConfig(b))
	req, _ := http.NewRequest("GET", s.base+"/v1/presence/users/bob", nil)
	req.Header.Set("Authorization", "Bearer "+token(b, "alice"))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), `"user":"bob"`) {
			b.Fatalf("%d %s", resp.StatusCode, body)
		}
		lat = append(lat, time.Since(t0))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
