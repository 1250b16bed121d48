// Package promlabels creates the series of a labelled metric up front: a
// label vector has no series until its first use, and an alert on a
// counter that does not exist yet (rate(x_total[5m]) > 0, or "absent")
// cannot fire or fires wrongly. Modules call Init with the label values
// their code can produce, so every series exists at zero from the start.
package promlabels

// Init calls with(values...) for every combination of the given label
// values, one slice per label in the vector's order; with is the vector's
// WithLabelValues wrapped in a closure (its return type differs by kind).
func Init(with func(values ...string), dims ...[]string) {
	for _, combo := range combos(dims) {
		with(combo...)
	}
}

func combos(dims [][]string) [][]string {
	out := [][]string{{}}
	for _, values := range dims {
		next := make([][]string, 0, len(out)*len(values))
		for _, prefix := range out {
			for _, v := range values {
				next = append(next, append(append([]string(nil), prefix...), v))
			}
		}
		out = next
	}
	return out
}
