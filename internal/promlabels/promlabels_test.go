package promlabels

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func TestInitCreatesEverySeriesAtZero(t *testing.T) {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"a", "b"})
	require.Zero(t, testutil.CollectAndCount(v), "a vector starts without series")
	Init(func(lv ...string) { v.WithLabelValues(lv...) }, []string{"1", "2"}, []string{"p", "q", "r"})
	require.Equal(t, 6, testutil.CollectAndCount(v))
	require.NoError(t, testutil.CollectAndCompare(v, strings.NewReader(`
# HELP x_total x
# TYPE x_total counter
x_total{a="1",b="p"} 0
x_total{a="1",b="q"} 0
x_total{a="1",b="r"} 0
x_total{a="2",b="p"} 0
x_total{a="2",b="q"} 0
x_total{a="2",b="r"} 0
`)))
}
