package app

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/internal/buildinfo"
)

// buildInfo is presenced_build_info{version,commit,go} 1: which build a
// process runs, to join onto any other series in a query or an alert.
func buildInfo() prometheus.Collector {
	bi := buildinfo.Get()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "presenced_build_info",
		Help: "Always 1, labelled with the version, commit and Go release of this build.",
	}, []string{"version", "commit", "go"})
	g.WithLabelValues(bi.Version, bi.Commit, bi.Go).Set(1)
	return g
}
