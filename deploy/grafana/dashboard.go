// Package grafana builds deploy/grafana/presenced.json, the presenced
// dashboard: a row per plane, each panel a PromQL query on the metrics that
// plane exports. Generated from Go (grafana-foundation-sdk) so the queries
// live next to a test that checks every metric they name against a real
// /metrics scrape. Regenerate with `go run ./deploy/grafana/gen`.
package grafana

import (
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// A query of a panel: PromQL and its legend.
type query struct{ expr, legend string }

// A panel: a time series of one or more queries.
type panel struct {
	title, unit, description string
	queries                  []query
}

// A row: the panels of one plane.
type row struct {
	title  string
	panels []panel
}

// The rows are the dashboard; Queries lists every PromQL expression in them
// for the test.
var rows = []row{
	{"Overview: every plane", []panel{
		{"Requests by plane and status", "reqps", "HTTP requests per second, by the plane (ServiceMonitor target label) and status code.",
			[]query{{`sum by (component, code) (rate(presenced_http_request_duration_seconds_count[$__rate_interval]))`, "{{component}} {{code}}"}}},
		{"Request latency p99 by route", "s", "",
			[]query{{`histogram_quantile(0.99, sum by (le, route) (rate(presenced_http_request_duration_seconds_bucket[$__rate_interval])))`, "{{route}}"}}},
		{"Open connections by plane", "short", "Client connections, sockets included (http.max_connections caps them).",
			[]query{{`sum by (component) (presenced_http_open_connections)`, "{{component}}"}}},
		{"Database pools: acquired / max", "percentunit", "Pool saturation, by plane and pool (main, readonly, webhook).",
			[]query{{`sum by (component, pool) (presenced_postgres_pool_acquired_connections) / sum by (component, pool) (presenced_postgres_pool_max_connections)`, "{{component}} {{pool}}"}}},
	}},
	{"ingest: viewer heartbeats", []panel{
		{"HyperLogLog writes", "ops", "Coalesced writes to Redis: bounded by flush windows, not by viewers.",
			[]query{{`sum(rate(presenced_viewers_hll_writes_total[$__rate_interval]))`, "writes/s"}}},
		{"Flush duration p99", "s", "",
			[]query{{`histogram_quantile(0.99, sum by (le) (rate(presenced_viewers_flush_duration_seconds_bucket[$__rate_interval])))`, "p99"}}},
		{"Rate limiter failing open", "ops", "Heartbeats let through because Redis failed (PresencedViewersFailingOpen).",
			[]query{{`sum(rate(presenced_viewers_ratelimit_fail_open_total[$__rate_interval]))`, "fail-open/s"}}},
	}},
	{"count: viewer counts", []panel{
		{"Count publishes", "ops", "",
			[]query{{`sum(rate(presenced_viewers_count_publishes_total[$__rate_interval]))`, "publishes/s"}}},
		{"Stale counts served", "ops", "",
			[]query{{`sum(rate(presenced_viewers_count_stale_total[$__rate_interval]))`, "stale/s"}}},
		{"Live hotels and hub topics", "short", "",
			[]query{{`sum(presenced_viewers_live_hotels)`, "live hotels"}, {`sum(presenced_hub_topics)`, "hub topics"}}},
	}},
	{"presence: gateways", []panel{
		{"Presence sockets by gateway", "short", "",
			[]query{{`sum by (instance) (presenced_presence_connections)`, "{{instance}}"}}},
		{"Status change to subscriber p99", "s", "SPEC: p99 <= 500 ms.",
			[]query{{`histogram_quantile(0.99, sum by (le) (rate(presenced_presence_push_latency_seconds_bucket[$__rate_interval])))`, "p99"}}},
		{"Tracked sessions vs sockets", "short", "The gap is the false-online proxy (PresencedFalseOnline).",
			[]query{{`max(presenced_presence_tracked_sessions)`, "tracked"}, {`sum(presenced_presence_connections)`, "sockets"}}},
		{"Slow clients dropped", "ops", "",
			[]query{{`sum(rate(presenced_presence_slow_client_drops_total[$__rate_interval]))`, "drops/s"}}},
	}},
	{"admit: waiting room", []panel{
		{"Line and checkout", "short", "People in line, live checkout leases and capacity, over the ticked events.",
			[]query{{`sum(presenced_waitingroom_queue_depth)`, "in line"}, {`sum(presenced_waitingroom_active_leases)`, "in checkout"}, {`sum(presenced_waitingroom_capacity)`, "capacity"}}},
		{"Admissions", "ops", "",
			[]query{{`sum(rate(presenced_waitingroom_admitted_total[$__rate_interval]))`, "admitted/s"}}},
		{"Join to admission p99", "s", "",
			[]query{{`histogram_quantile(0.99, sum by (le) (rate(presenced_waitingroom_join_to_admit_seconds_bucket[$__rate_interval])))`, "p99"}}},
		{"Requests by outcome", "reqps", "unavailable: Redis failed and the line failed closed.",
			[]query{{`sum by (op, result) (rate(presenced_waitingroom_requests_total[$__rate_interval]))`, "{{op}} {{result}}"}}},
	}},
	{"browse: seat maps", []panel{
		{"Seat-map fill contention", "ops", "Readers that found another refilling the snapshot.",
			[]query{{`sum(rate(presenced_booking_seatmap_fill_contention_total[$__rate_interval]))`, "waits/s"}}},
		{"Replica lag", "s", "The browse pool's replica (0 on a primary or when caught up).",
			[]query{{`max by (instance) (presenced_postgres_replica_lag_seconds{pool="readonly"})`, "{{instance}}"}}},
		{"Hotel search p99", "s", "",
			[]query{{`histogram_quantile(0.99, sum by (le) (rate(presenced_booking_search_duration_seconds_bucket[$__rate_interval])))`, "p99"}}},
	}},
	{"booking: holds", []panel{
		{"Hold outcomes", "reqps", "201 held, 409 taken (a correct answer), 429 limited, 5xx the SLO's errors.",
			[]query{{`sum by (code) (rate(presenced_booking_hold_outcomes_total[$__rate_interval]))`, "{{code}}"}}},
		{"Hold latency p99", "s", "SPEC: p99 < 50 ms uncontended.",
			[]query{{`histogram_quantile(0.99, sum by (le) (rate(presenced_booking_hold_duration_seconds_bucket[$__rate_interval])))`, "p99"}}},
		{"Seat lock wait p99", "s", "",
			[]query{{`histogram_quantile(0.99, sum by (le) (rate(presenced_booking_seat_lock_wait_seconds_bucket[$__rate_interval])))`, "p99"}}},
		{"Pool waits", "ops", "Acquires that found the pool empty.",
			[]query{{`sum by (pool) (rate(presenced_postgres_pool_empty_acquires_total[$__rate_interval]))`, "{{pool}}"}}},
	}},
	{"worker: background loops", []panel{
		{"Oldest unpublished outbox event", "s", "PresencedOutboxStale at 60 s.",
			[]query{{`max(presenced_outbox_oldest_unpublished_age_seconds)`, "age"}}},
		{"Leaders", "short", "Processes leading the outbox relay and the viewers controller (1 each).",
			[]query{{`sum(presenced_outbox_relay_leader)`, "outbox relay"}, {`sum(presenced_viewers_controller_leader)`, "viewers controller"}}},
		{"Correctness monitors", "short", "Each must read 0.",
			[]query{{`max by (check) (presenced_payments_monitor_violations)`, "{{check}}"}}},
		{"Admission tick p99", "s", "",
			[]query{{`histogram_quantile(0.99, sum by (le) (rate(presenced_waitingroom_tick_duration_seconds_bucket[$__rate_interval])))`, "p99"}}},
	}},
}

// Queries is every PromQL expression of the dashboard.
func Queries() []string {
	var out []string
	for _, r := range rows {
		for _, p := range r.panels {
			for _, q := range p.queries {
				out = append(out, q.expr)
			}
		}
	}
	return out
}

// JSON is the dashboard as Grafana imports it.
func JSON() ([]byte, error) {
	ds := common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}
	// The classic dashboard JSON, which every Grafana version imports; the
	// v2 schema the SDK prefers needs Grafana 12's app platform.
	//lint:ignore SA1019 deliberately the v1 dashboard (see above)
	b := dashboard.NewDashboardBuilder("presenced").
		Uid("presenced").
		Description("presenced by plane. Generated by deploy/grafana (go run ./deploy/grafana/gen); do not edit the JSON.").
		Tags([]string{"presenced"}).
		Refresh("30s").
		Time("now-1h", "now").
		Timezone(common.TimeZoneBrowser).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Prometheus").Type("prometheus"))
	for _, r := range rows {
		b.WithRow(dashboard.NewRowBuilder(r.title))
		for _, p := range r.panels {
			pb := timeseries.NewPanelBuilder().Title(p.title).Unit(p.unit).Datasource(ds).Height(8).Span(6)
			if p.description != "" {
				pb.Description(p.description)
			}
			for i, q := range p.queries {
				pb.WithTarget(prometheus.NewDataqueryBuilder().Datasource(ds).Expr(q.expr).LegendFormat(q.legend).RefId(string(rune('A' + i))))
			}
			b.WithPanel(pb)
		}
	}
	d, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("build dashboard: %w", err)
	}
	out, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("dashboard json: %w", err)
	}
	return append(out, '\n'), nil
}
