package contract

import (
	"bufio"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// tally counts a run's requests and answers.
type tally struct {
	mu         sync.Mutex
	requests   int
	byStatus   map[int]int
	byKind     map[string]int
	noAnswer   int
	serverErrs int
	bad        int // answers the documents do not describe
	failures   []string
	serverFail []string // the 5xx, kept apart so they are never crowded out
	slowest    time.Duration
	slowestWas string
	ops        map[string]bool
	excluded   map[string]int
}

func newTally() *tally {
	return &tally{byStatus: map[int]int{}, byKind: map[string]int{}, ops: map[string]bool{}, excluded: map[string]int{}}
}

// maxFailures bounds the failures kept for the report.
const maxFailures = 40

func (t *tally) fail(format string, args ...any) {
	if len(t.failures) < maxFailures {
		t.failures = append(t.failures, fmt.Sprintf(format, args...))
	}
}

// record adds one case's outcome.
func (t *tally) record(k *kase, a *answer, err error, problems []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.requests++
	t.ops[k.op.id] = true
	kind, _, _ := strings.Cut(k.what, ":")
	kind, _, _ = strings.Cut(kind, " ")
	t.byKind[kind]++
	if err != nil {
		t.noAnswer++
		if !k.malformed {
			t.bad++
			t.fail("case %d (%s %s, %s): %v", k.n, k.req.method, excerpt([]byte(k.req.target), 80), k.what, err)
		}
		return
	}
	t.byStatus[a.status]++
	if a.status >= 500 && !(k.malformed && slices.Contains(framing, a.status)) {
		t.serverErrs++
	}
	if !k.slow && !k.malformed && a.took > t.slowest {
		t.slowest, t.slowestWas = a.took, fmt.Sprintf("case %d (%s %s, %s)", k.n, k.req.method, excerpt([]byte(k.req.target), 60), k.what)
	}
	if len(problems) > 0 && a.status >= 500 && len(t.serverFail) < maxFailures {
		t.serverFail = append(t.serverFail, fmt.Sprintf("case %d (%s %s for %s %s, %s): %s", k.n, k.req.method, excerpt([]byte(k.req.target), 80), k.op.method, k.op.path, k.what, strings.Join(problems, "; ")))
	}
	if len(problems) > 0 {
		t.bad++
		t.fail("case %d (%s %s for %s %s, %s): %s", k.n, k.req.method, excerpt([]byte(k.req.target), 80), k.op.method, k.op.path, k.what, strings.Join(problems, "; "))
	}
}

func (t *tally) summary(ops int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "contract: %d operations (%d reached), %d requests; answers by status:", ops, len(t.ops), t.requests)
	for _, s := range slices.Sorted(maps.Keys(t.byStatus)) {
		fmt.Fprintf(&b, " %d×%d", s, t.byStatus[s])
	}
	fmt.Fprintf(&b, "; closed without an answer: %d (malformed heads only allowed)", t.noAnswer)
	fmt.Fprintf(&b, "\ncontract: by input:")
	for _, k := range slices.Sorted(maps.Keys(t.byKind)) {
		fmt.Fprintf(&b, " %s %d,", k, t.byKind[k])
	}
	fmt.Fprintf(&b, "\ncontract: %d × 5xx, %d undocumented or invalid answers; slowest answer %s: %s",
		t.serverErrs, t.bad, t.slowest.Round(time.Millisecond), t.slowestWas)
	if len(t.excluded) > 0 {
		fmt.Fprintf(&b, "\ncontract: left out while their defects are open:")
		for _, k := range slices.Sorted(maps.Keys(t.excluded)) {
			fmt.Fprintf(&b, " %s ×%d;", k, t.excluded[k])
		}
	}
	return b.String()
}

// memory is what the server's /metrics and /proc say of its memory.
type memory struct {
	rss, heapInuse, goroutines float64
	peakRSS                    float64 // VmHWM: the most resident since the process started
}

func (m memory) String() string {
	return fmt.Sprintf("RSS %.0f MiB (peak %.0f MiB), heap in use %.0f MiB, %0.f goroutines",
		m.rss/(1<<20), m.peakRSS/(1<<20), m.heapInuse/(1<<20), m.goroutines)
}

// measure scrapes the server's memory figures.
func measure(base string, pid int) (memory, error) {
	var m memory
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		switch name {
		case "process_resident_memory_bytes":
			m.rss = v
		case "go_memstats_heap_inuse_bytes":
			m.heapInuse = v
		case "go_goroutines":
			m.goroutines = v
		}
	}
	if err := sc.Err(); err != nil {
		return m, err
	}
	m.peakRSS = peakRSS(pid)
	return m, nil
}

// peakRSS reads VmHWM of a process (Linux), 0 where there is none.
func peakRSS(pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			return kb * 1024
		}
	}
	return 0
}
