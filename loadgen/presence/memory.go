package presence

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/presenced/presenced/loadgen"
)

// memory is what the gateways report of their memory and connections,
// summed over them. The Go figures are the runtime's own (runtime/metrics,
// as the Prometheus Go collector exports them).
type memory struct {
	rss, heapAlloc, heapInuse, stack, goroutines, conns int64
	ok                                                  bool
}

// gatewayMemory reads the process and Go memory metrics of the gateways.
func gatewayMemory(ctx context.Context, client *http.Client, gws []string) memory {
	var m memory
	for _, g := range gws {
		err := scrape(ctx, client, g, func(name, v string) {
			f, _ := strconv.ParseFloat(v, 64)
			switch name {
			case "process_resident_memory_bytes":
				m.rss += int64(f)
			case "go_memstats_heap_alloc_bytes":
				m.heapAlloc += int64(f)
			case "go_memstats_heap_inuse_bytes":
				m.heapInuse += int64(f)
			case "go_memstats_stack_inuse_bytes":
				m.stack += int64(f)
			case "go_goroutines":
				m.goroutines += int64(f)
			case "presenced_presence_connections":
				m.conns += int64(f)
			}
		})
		if err != nil {
			return memory{}
		}
	}
	m.ok = true
	return m
}

// reportMemory adds the memory each connection opened between before and
// after costs the gateways.
func reportMemory(r *loadgen.Runner, before, after memory, follow int) {
	if !before.ok || !after.ok || after.conns <= before.conns {
		return
	}
	n := float64(after.conns - before.conns)
	kib := func(a, b int64) float64 { return perConnKiB(before, after, a, b) }
	r.AddFigure("server RSS per connection", "%s", rssFigure(before, after, follow))
	// Heap counts garbage not yet collected: a collection between the
	// readings can make a difference negative, and then it says nothing.
	if after.heapAlloc >= before.heapAlloc && after.stack >= before.stack {
		r.AddFigure("of which Go heap / stacks", "%.1f KiB heap objects (%.1f KiB in use spans) / %.1f KiB stacks, %.2f goroutines per connection",
			kib(after.heapAlloc, before.heapAlloc), kib(after.heapInuse, before.heapInuse), kib(after.stack, before.stack),
			float64(after.goroutines-before.goroutines)/n)
	} else {
		r.AddFigure("of which Go heap / stacks", "not measurable in this run (the gateway collected garbage between the readings)")
	}
}

// rssFigure is the gateways' RSS per connection opened between before and
// after (which opened some).
func rssFigure(before, after memory, follow int) string {
	if after.rss < before.rss {
		// A gateway that held more before (an earlier run) gives memory
		// back to the system while this one connects.
		return fmt.Sprintf("not measurable in this run (RSS fell from %.0f to %.0f MiB: the gateways returned memory of earlier connections); measure on fresh gateways",
			float64(before.rss)/(1<<20), float64(after.rss)/(1<<20))
	}
	return fmt.Sprintf("%.1f KiB (%d -> %d connections on the gateways, %d subscriptions each; RSS %.0f -> %.0f MiB)",
		perConnKiB(before, after, after.rss, before.rss), before.conns, after.conns, follow,
		float64(before.rss)/(1<<20), float64(after.rss)/(1<<20))
}

// perConnKiB spreads a figure's growth from b to a over the connections
// opened between before and after.
func perConnKiB(before, after memory, a, b int64) float64 {
	return float64(a-b) / float64(after.conns-before.conns) / 1024
}
