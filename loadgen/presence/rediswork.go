package presence

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// cmdStat is one command's totals from INFO commandstats.
type cmdStat struct {
	calls int64
	usec  int64
}

// redisCommands sums INFO commandstats over the servers' Redis; nil when
// any of them cannot be read, so a phase never reports half a figure.
func redisCommands(ctx context.Context, clients []*redis.Client) map[string]cmdStat {
	if len(clients) == 0 {
		return nil
	}
	out := map[string]cmdStat{}
	for _, c := range clients {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return nil
		}
		for name, st := range parseCommandStats(info) {
			sum := out[name]
			sum.calls += st.calls
			sum.usec += st.usec
			out[name] = sum
		}
	}
	return out
}

// parseCommandStats reads lines like
// "cmdstat_evalsha:calls=12,usec=340,usec_per_call=28.33,...".
func parseCommandStats(info string) map[string]cmdStat {
	out := map[string]cmdStat{}
	for _, line := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var st cmdStat
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "calls":
				st.calls = n
			case "usec":
				st.usec = n
			}
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = st
	}
	return out
}

// redisWork describes the commands Redis ran between two readings, per
// unit of work (a connect, a change, an idle second): how many, the
// command time they took, and the commands that took most of it (calls ×
// their command time, per unit; a script's time includes its commands'). The
// commands the meter itself sends (INFO) are left out.
func redisWork(before, after map[string]cmdStat, units float64, unit string) string {
	if before == nil || after == nil || units <= 0 {
		return "n/a"
	}
	type row struct {
		name        string
		calls, usec int64
	}
	var rows []row
	var calls, usec int64
	for name, a := range after {
		if name == "info" {
			continue
		}
		b := before[name]
		r := row{name, a.calls - b.calls, a.usec - b.usec}
		if r.calls <= 0 {
			continue
		}
		rows = append(rows, r)
		calls += r.calls
		usec += r.usec
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].usec > rows[j].usec })
	var top []string
	for _, r := range rows[:min(len(rows), 6)] {
		top = append(top, fmt.Sprintf("%s %.3g×%.3gus", r.name, float64(r.calls)/units, float64(r.usec)/units))
	}
	return fmt.Sprintf("%.3g commands and %.3g us of command time per %s (%s)",
		float64(calls)/units, float64(usec)/units, unit, strings.Join(top, ", "))
}
