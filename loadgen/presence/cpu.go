package presence

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// cpuMeter reads the CPU time used so far by the servers (their
// process_cpu_seconds_total), by Redis (INFO cpu) and by this process, so a
// phase of the run can say what it cost each of them.
type cpuMeter struct {
	client  *http.Client
	servers []string
	redis   []*redis.Client
}

func newCPUMeter(client *http.Client, servers, redisURLs []string) *cpuMeter {
	m := &cpuMeter{client: client, servers: servers}
	for _, u := range redisURLs {
		opt, err := redis.ParseURL(u)
		if err != nil {
			continue
		}
		opt.PoolSize = 1
		m.redis = append(m.redis, redis.NewClient(opt))
	}
	return m
}

func (m *cpuMeter) close() {
	for _, c := range m.redis {
		_ = c.Close()
	}
}

// cpuSample is the CPU seconds used up to one moment; a negative figure was
// not readable.
type cpuSample struct {
	at                  time.Time
	server, redis, self float64
	load1               float64
	// each server's own CPU seconds, in --servers order, so a scale-out
	// run shows how the work spreads over the gateways.
	perServer []float64
	// commands is Redis's INFO commandstats (nil: not read).
	commands map[string]cmdStat
}

func (m *cpuMeter) sample(ctx context.Context) cpuSample {
	s := cpuSample{at: time.Now(), server: -1, redis: -1, load1: loadAverage()}
	if len(m.servers) > 0 {
		s.server = 0
		for _, srv := range m.servers {
			v, ok := scrapeCPU(ctx, m.client, srv)
			if !ok {
				s.server = -1
				break
			}
			s.server += v
			s.perServer = append(s.perServer, v)
		}
	}
	if len(m.redis) > 0 {
		s.redis = 0
		for _, c := range m.redis {
			v, ok := redisCPU(ctx, c)
			if !ok {
				s.redis = -1
				break
			}
			s.redis += v
		}
		s.commands = redisCommands(ctx, m.redis)
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	return s
}

// since describes the CPU used between a and s, as shares of one core.
func (s cpuSample) since(a cpuSample) string {
	el := s.at.Sub(a.at).Seconds()
	share := func(x, y float64) string {
		if x < 0 || y < 0 || el <= 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.1f %%", 100*(x-y)/el)
	}
	each := ""
	if n := len(s.perServer); n > 1 && n == len(a.perServer) && s.server >= 0 && a.server >= 0 {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = share(s.perServer[i], a.perServer[i])
		}
		each = " (each: " + strings.Join(parts, ", ") + ")"
	}
	return fmt.Sprintf("server %s%s, Redis %s, this loadgen %s of one core over %.1f s; load average %.2f -> %.2f",
		share(s.server, a.server), each, share(s.redis, a.redis), share(s.self, a.self), el, a.load1, s.load1)
}

// scrapeCPU reads process_cpu_seconds_total from a server's /metrics.
func scrapeCPU(ctx context.Context, client *http.Client, base string) (float64, bool) {
	var cpu float64
	found := false
	err := scrape(ctx, client, base, func(name, value string) {
		if name == "process_cpu_seconds_total" {
			cpu, _ = strconv.ParseFloat(value, 64)
			found = true
		}
	})
	return cpu, err == nil && found
}

// scrape calls f with each unlabelled sample of a server's /metrics.
func scrape(ctx context.Context, client *http.Client, base string, f func(name, value string)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("metrics: status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if name, v, ok := strings.Cut(sc.Text(), " "); ok {
			f(name, v)
		}
	}
	return sc.Err()
}

// redisCPU is used_cpu_sys + used_cpu_user of INFO cpu.
func redisCPU(ctx context.Context, c *redis.Client) (float64, bool) {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, false
	}
	var total float64
	n := 0
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				total += f
				n++
			}
		}
	}
	return total, n == 2
}

// loadAverage is the one-minute load average of this machine (0 if unknown).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b) + " 0")[0], 64)
	return f
}
