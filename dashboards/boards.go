package dashboards

import (
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// Board is one generated dashboard and the file it is written to.
type Board struct {
	File      string // under grafana/, e.g. "meridian-fleet.json"
	Dashboard dashboard.Dashboard
}

// JSON is the board as Grafana imports it: indented, with a final newline.
func (b Board) JSON() ([]byte, error) {
	out, err := json.MarshalIndent(b.Dashboard, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("dashboards: encode %s: %w", b.File, err)
	}
	return append(out, '\n'), nil
}

// query is one PromQL target of a panel and its legend.
type query struct{ expr, legend string }

func q(expr, legend string) query { return query{expr, legend} }

// ds is the datasource every panel uses: the board's datasource variable.
var ds = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

func targets(qs []query) []cog.Builder[variants.Dataquery] {
	out := make([]cog.Builder[variants.Dataquery], 0, len(qs))
	for i, x := range qs {
		out = append(out, prometheus.NewDataqueryBuilder().Expr(x.expr).LegendFormat(x.legend).RefId(string(rune('A'+i))).Datasource(ds))
	}
	return out
}

// graph is a time series panel.
func graph(title, unit, desc string, w uint32, qs ...query) *timeseries.PanelBuilder {
	return timeseries.NewPanelBuilder().Title(title).Description(desc).Unit(unit).Datasource(ds).
		Span(w).Height(8).Targets(targets(qs)).FillOpacity(10)
}

// single is a stat panel showing the last value.
func single(title, unit, desc string, qs ...query) *stat.PanelBuilder {
	return stat.NewPanelBuilder().Title(title).Description(desc).Unit(unit).Datasource(ds).
		Span(4).Height(4).Targets(targets(qs)).GraphMode(common.BigValueGraphModeArea).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}))
}

// board starts a dashboard with Meridian's common settings and its
// datasource variable.
func board(uid, title, desc string) *dashboard.DashboardBuilder {
	return dashboard.NewDashboardBuilder(title).Uid(uid).Description(desc).
		Tags([]string{"meridian"}).Refresh("30s").Time("now-3h", "now").Timezone(common.TimeZoneBrowser).
		Tooltip(dashboard.DashboardCursorSyncCrosshair).Editable().
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus"))
}

// labelVar is a multi-value variable over one label of a metric.
func labelVar(name, label, metric string) *dashboard.QueryVariableBuilder {
	qs := fmt.Sprintf("label_values(%s, %s)", metric, label)
	return dashboard.NewQueryVariableBuilder(name).Label(label).Datasource(ds).
		Query(dashboard.StringOrMap{String: &qs}).Multi(true).IncludeAll(true).AllValue(".*").
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).Sort(dashboard.VariableSortAlphabeticalAsc)
}

const rate = "[$__rate_interval]"

// Boards builds the four boards, in a fixed order.
func Boards() ([]Board, error) {
	var out []Board
	for _, b := range []struct {
		file string
		b    *dashboard.DashboardBuilder
	}{
		{"meridian-fleet.json", fleet()},
		{"meridian-queues.json", queues()},
		{"meridian-workload-flow.json", flow()},
		{"meridian-hub-internals.json", internals()},
	} {
		d, err := b.b.Build()
		if err != nil {
			return nil, fmt.Errorf("dashboards: build %s: %w", b.file, err)
		}
		out = append(out, Board{File: b.file, Dashboard: d})
	}
	return out, nil
}

func fleet() *dashboard.DashboardBuilder {
	return board("meridian-fleet", "Meridian / Fleet", "Every cluster's state, capacity and free GPUs by accelerator class, and the agents' health.").
		WithVariable(labelVar("cluster", "cluster", "meridian_cluster_state")).
		WithVariable(labelVar("class", "class", "meridian_cluster_capacity_gpus")).
		WithRow(dashboard.NewRowBuilder("Clusters")).
		WithPanel(single("READY clusters", "none", "Clusters heartbeating and taking new work.", q(`sum(meridian_cluster_state{state="READY"})`, "READY"))).
		WithPanel(single("LOST clusters", "none", "Clusters silent past the cluster timeout: their unacknowledged dispatches go elsewhere.", q(`sum(meridian_cluster_state{state="LOST"})`, "LOST"))).
		WithPanel(single("DRAINING clusters", "none", "Clusters an operator closed to new work.", q(`sum(meridian_cluster_state{state="DRAINING"})`, "DRAINING"))).
		WithPanel(single("GPUs free", "none", "Free GPUs across the fleet (fractions included).", q(`sum(meridian_cluster_free_gpus{cluster=~"$cluster", class=~"$class"})`, "free"))).
		WithPanel(single("GPUs installed", "none", "GPUs on schedulable nodes across the fleet.", q(`sum(meridian_cluster_capacity_gpus{cluster=~"$cluster", class=~"$class"})`, "installed"))).
		WithPanel(single("Fleet GPU use", "percentunit", "Share of the fleet's GPUs in use.",
			q(`1 - sum(meridian_cluster_free_gpus{cluster=~"$cluster", class=~"$class"}) / sum(meridian_cluster_capacity_gpus{cluster=~"$cluster", class=~"$class"})`, "used"))).
		WithPanel(graph("Cluster state", "none", "1 for the state each cluster is in.", 12,
			q(`max by (cluster, state) (meridian_cluster_state{cluster=~"$cluster"}) == 1`, "{{cluster}} {{state}}"))).
		WithPanel(graph("Heartbeat age", "s", "Seconds since each cluster's last heartbeat; a cluster is LOST past the cluster timeout (15 s by default).", 12,
			q(`time() - max by (cluster) (meridian_cluster_last_heartbeat_timestamp_seconds{cluster=~"$cluster"})`, "{{cluster}}"))).
		WithRow(dashboard.NewRowBuilder("Capacity")).
		WithPanel(graph("Installed GPUs by cluster and class", "none", "As last advertised by each agent.", 12,
			q(`max by (cluster, class) (meridian_cluster_capacity_gpus{cluster=~"$cluster", class=~"$class"})`, "{{cluster}} {{class}}"))).
		WithPanel(graph("Free GPUs by cluster and class", "none", "Free milli-GPUs / 1000, fractions included.", 12,
			q(`max by (cluster, class) (meridian_cluster_free_gpus{cluster=~"$cluster", class=~"$class"})`, "{{cluster}} {{class}}"))).
		WithPanel(graph("GPU use by cluster", "percentunit", "Share of each cluster's GPUs in use.", 12,
			q(`1 - sum by (cluster) (meridian_cluster_free_gpus{cluster=~"$cluster", class=~"$class"}) / sum by (cluster) (meridian_cluster_capacity_gpus{cluster=~"$cluster", class=~"$class"})`, "{{cluster}}"))).
		WithPanel(graph("Running dispatches by cluster", "none", "Dispatches each agent last reported launched or running.", 12,
			q(`max by (cluster) (meridian_cluster_running_dispatches{cluster=~"$cluster"})`, "{{cluster}}"))).
		WithRow(dashboard.NewRowBuilder("Agents")).
		WithPanel(graph("Connector errors", "ops", "Faults of the cluster backends (Slurm, Kubernetes) seen by each agent, by operation.", 12,
			q(`sum by (job, instance, operation) (rate(meridian_agent_connector_errors_total`+rate+`))`, "{{instance}} {{operation}}"))).
		WithPanel(graph("Launches by result", "ops", "Dispatch launch outcomes at the agents.", 12,
			q(`sum by (result) (rate(meridian_agent_launches_total`+rate+`))`, "{{result}}"))).
		WithPanel(graph("Agent NATS connection", "none", "1 while each agent is connected to NATS.", 8,
			q(`meridian_agent_nats_connected`, "{{instance}}"))).
		WithPanel(graph("Agent outbox", "none", "Events waiting at each agent to be stored on the EVENTS stream.", 8,
			q(`meridian_agent_outbox_events`, "{{instance}}"))).
		WithPanel(graph("Credential expiry", "d", "Days until each agent's NATS credentials expire.", 8,
			q(`(meridian_agent_credential_expiry_timestamp_seconds - time()) / 86400`, "{{instance}} {{credential}}"))).
		WithPanel(graph("Evictions by reason", "ops", "Started work stopped and sent back to the queue: hub preemptions, the cluster's own preemptions, lost clusters.", 24,
			q(`sum by (reason) (rate(meridian_evictions_total`+rate+`))`, "{{reason}}")))
}

func queues() *dashboard.DashboardBuilder {
	sel := `{queue=~"$queue", class=~"$class"}`
	return board("meridian-queues", "Meridian / Queues and fairshare", "Per queue and accelerator class: usage against nominal quota, borrowing and lending, fair-share position and the fairness error.").
		WithVariable(labelVar("queue", "queue", "meridian_queue_nominal_gpus")).
		WithVariable(labelVar("class", "class", "meridian_queue_nominal_gpus")).
		WithRow(dashboard.NewRowBuilder("Quota")).
		WithPanel(graph("Usage by queue", "none", "GPUs each queue's subtree holds.", 12,
			q(`max by (queue, class) (meridian_queue_usage_gpus`+sel+`)`, "{{queue}} {{class}}"))).
		WithPanel(graph("Usage / nominal", "percentunit", "Above 100%: the queue borrows.", 12,
			q(`max by (queue, class) (meridian_queue_usage_gpus`+sel+`) / max by (queue, class) (meridian_queue_nominal_gpus`+sel+` > 0)`, "{{queue}} {{class}}"))).
		WithPanel(graph("Nominal quota", "none", "Each queue's effective nominal quota.", 8,
			q(`max by (queue, class) (meridian_queue_nominal_gpus`+sel+`)`, "{{queue}} {{class}}"))).
		WithPanel(graph("Borrowed", "none", "GPUs held above nominal, borrowed from idle quota elsewhere.", 8,
			q(`max by (queue, class) (meridian_queue_borrowed_gpus`+sel+`)`, "{{queue}} {{class}}"))).
		WithPanel(graph("Lent", "none", "GPUs of the queue's idle nominal that others hold now (reclaimable).", 8,
			q(`max by (queue, class) (meridian_queue_lent_gpus`+sel+`)`, "{{queue}} {{class}}"))).
		WithRow(dashboard.NewRowBuilder("Fairshare")).
		WithPanel(graph("Fairness error by class", "percentunit", "Armada's fairness error: the share of a class's capacity by which queues fall short of their demand-capped weighted fair share. 0 is fair.", 12,
			q(`max by (class) (meridian_fairness_error{class=~"$class"})`, "{{class}}"))).
		WithPanel(graph("Fairshare factor", "none", "Fair Tree factor of each leaf queue; 1 is first in line.", 12,
			q(`max by (queue) (meridian_queue_fairshare_factor{queue=~"$queue"})`, "{{queue}}"))).
		WithPanel(graph("Decayed usage", "none", "GPU-seconds in the fairshare ledger, decayed by the half-life.", 12,
			q(`max by (queue) (meridian_queue_decayed_usage_gpu_seconds{queue=~"$queue"})`, "{{queue}}"))).
		WithPanel(graph("Preemptions by rule", "ops", "Hub preemptions: priority or reclaim of lent quota.", 12,
			q(`sum by (reason) (rate(meridian_preemptions_total`+rate+`))`, "{{reason}}"))).
		WithRow(dashboard.NewRowBuilder("Work")).
		WithPanel(graph("Pending workloads by queue", "none", "Queued workloads of each leaf queue.", 12,
			q(`max by (queue) (meridian_queue_pending_workloads{queue=~"$queue"})`, "{{queue}}"))).
		WithPanel(graph("Running workloads by queue", "none", "Dispatched or running workloads of each leaf queue.", 12,
			q(`max by (queue) (meridian_queue_running_workloads{queue=~"$queue"})`, "{{queue}}")))
}

func flow() *dashboard.DashboardBuilder {
	return board("meridian-workload-flow", "Meridian / Workload flow", "Throughput from submit to the end, the latency of each step, and why work waits.").
		WithRow(dashboard.NewRowBuilder("Throughput")).
		WithPanel(graph("Submits and dispatches", "ops", "Workloads stored per second, single and batch submits alike, by who wrote them first (intake: the leader's loop, with its first decision; group_commit: the API, QUEUED), and workloads dispatched per second.", 12,
			q(`sum by (writer) (rate(meridian_api_submitted_workloads_total`+rate+`))`, "submitted ({{writer}})"),
			q(`sum(rate(meridian_dispatches_total`+rate+`))`, "dispatched"))).
		WithPanel(graph("Agent events by type", "ops", "Events the hub applied: accepted, running, the end states, preempted, rejected.", 12,
			q(`sum by (type) (rate(meridian_agent_events_total`+rate+`))`, "{{type}}"))).
		WithRow(dashboard.NewRowBuilder("Latency")).
		WithPanel(graph("Submit to dispatch", "s", "Time from submit to the first dispatch of workloads that never waited for quota or room (pending_reason WaitingForScheduler).", 12,
			q(`histogram_quantile(0.5, sum by (le) (rate(meridian_workload_submit_to_dispatch_seconds_bucket{pending_reason="WaitingForScheduler"}`+rate+`)))`, "p50"),
			q(`histogram_quantile(0.99, sum by (le) (rate(meridian_workload_submit_to_dispatch_seconds_bucket{pending_reason="WaitingForScheduler"}`+rate+`)))`, "p99"))).
		WithPanel(graph("Submit to dispatch by last pending reason", "s", "p90 wait, by the reason a workload waited last.", 12,
			q(`histogram_quantile(0.9, sum by (le, pending_reason) (rate(meridian_workload_submit_to_dispatch_seconds_bucket`+rate+`)))`, "{{pending_reason}}"))).
		WithPanel(graph("Dispatch to running", "s", "Time from the dispatch to the agent's RUNNING report: delivery, the cluster's scheduler, image pulls.", 12,
			q(`histogram_quantile(0.5, sum by (le) (rate(meridian_workload_dispatch_to_running_seconds_bucket`+rate+`)))`, "p50"),
			q(`histogram_quantile(0.99, sum by (le) (rate(meridian_workload_dispatch_to_running_seconds_bucket`+rate+`)))`, "p99"))).
		WithPanel(graph("Dispatch latency SLO burn rate", "none", "Error ratio of the dispatch-latency SLO over its error budget (1%), per window; the alerts fire on 14.4 (1h and 5m) and 6 (6h and 30m).", 12,
			q(`meridian:dispatch_latency_slo:error_ratio_rate5m / 0.01`, "5m"),
			q(`meridian:dispatch_latency_slo:error_ratio_rate1h / 0.01`, "1h"),
			q(`meridian:dispatch_latency_slo:error_ratio_rate6h / 0.01`, "6h"))).
		WithRow(dashboard.NewRowBuilder("Waiting")).
		WithPanel(graph("Pending by reason", "none", "Queued workloads by pending reason code, as of the leader's last cycle.", 12,
			q(`max by (reason) (meridian_pending_workloads) > 0`, "{{reason}}"))).
		WithPanel(graph("Requeues", "ops", "Work sent back to the queue: lost clusters and evictions.", 12,
			q(`sum(rate(meridian_lost_cluster_requeues_total`+rate+`))`, "lost cluster"),
			q(`sum by (reason) (rate(meridian_evictions_total`+rate+`))`, "eviction: {{reason}}")))
}

func internals() *dashboard.DashboardBuilder {
	return board("meridian-hub-internals", "Meridian / Hub internals", "The scheduling loop, the API, etcd, NATS and leadership of the hub replicas.").
		WithRow(dashboard.NewRowBuilder("Leadership")).
		WithPanel(single("Leaders", "none", "Hub replicas leading now: 1 is healthy; 0 means nothing is scheduled.", q(`sum(meridian_scheduler_leader)`, "leaders"))).
		WithPanel(single("Hubs up", "none", "Hub replicas Prometheus scrapes successfully.", q(`sum(up{job="meridian-hub"})`, "up"))).
		WithPanel(single("Scheduler panics", "none", "Scheduler panics recovered in the last hour.", q(`sum(increase(meridian_scheduler_panics_total[1h]))`, "panics"))).
		WithPanel(graph("Leader by replica", "none", "1 for the replica that leads.", 12, q(`meridian_scheduler_leader`, "{{instance}}"))).
		WithRow(dashboard.NewRowBuilder("Scheduling loop")).
		WithPanel(graph("Cycle time", "s", "Duration of one scheduling cycle on the leader.", 12,
			q(`histogram_quantile(0.5, sum by (le) (rate(meridian_scheduler_cycle_seconds_bucket`+rate+`)))`, "p50"),
			q(`histogram_quantile(0.99, sum by (le) (rate(meridian_scheduler_cycle_seconds_bucket`+rate+`)))`, "p99"))).
		WithPanel(graph("Cycles, conflicts and stale events", "ops", "Cycles per second; commits refused because state changed; agent events for dispatches that are not current.", 12,
			q(`sum(rate(meridian_scheduler_cycle_seconds_count`+rate+`))`, "cycles"),
			q(`sum(rate(meridian_scheduler_commit_conflicts_total`+rate+`))`, "commit conflicts"),
			q(`sum(rate(meridian_stale_events_total`+rate+`))`, "stale events"))).
		WithRow(dashboard.NewRowBuilder("API")).
		WithPanel(graph("Requests by code", "reqps", "API requests by gRPC status code.", 12,
			q(`sum by (code) (rate(meridian_api_requests_total`+rate+`))`, "{{code}}"))).
		WithPanel(graph("Request latency p99", "s", "Unary API latency by method (streams are left out).", 12,
			q(`histogram_quantile(0.99, sum by (le, method) (rate(meridian_api_request_duration_seconds_bucket{method!~".*Watch.*"}`+rate+`)))`, "{{method}}"))).
		WithRow(dashboard.NewRowBuilder("etcd")).
		WithPanel(graph("Database size against quota", "percentunit", "etcd's database size over its backend quota; at 100% etcd refuses writes.", 8,
			q(`max by (instance) (etcd_mvcc_db_total_size_in_bytes / etcd_server_quota_backend_bytes)`, "{{instance}}"))).
		WithPanel(graph("WAL fsync p99", "s", "etcd's write-ahead log fsync latency; commits wait for it.", 8,
			q(`histogram_quantile(0.99, sum by (le, instance) (rate(etcd_disk_wal_fsync_duration_seconds_bucket`+rate+`)))`, "{{instance}}"))).
		WithPanel(graph("Has leader", "none", "1 while the etcd member sees a raft leader.", 8,
			q(`etcd_server_has_leader`, "{{instance}}"))).
		WithRow(dashboard.NewRowBuilder("NATS")).
		WithPanel(graph("Hub NATS connection", "none", "1 while each hub replica is connected to NATS; reconnects per second.", 8,
			q(`meridian_hub_nats_connected`, "{{instance}} connected"),
			q(`rate(meridian_hub_nats_reconnects_total`+rate+`)`, "{{instance}} reconnects"))).
		WithPanel(graph("Hub NATS messages", "ops", "Messages the hub's connection sent and received.", 8,
			q(`sum by (direction) (rate(meridian_hub_nats_messages_total`+rate+`))`, "{{direction}}"))).
		WithPanel(graph("Dispatch publishes", "ops", "Dispatches acknowledged by JetStream, duplicates it dropped, republishes of unacknowledged ones, and agents' failed publishes.", 8,
			q(`sum(rate(meridian_dispatch_publishes_total`+rate+`))`, "published"),
			q(`sum(rate(meridian_dispatch_publish_duplicates_total`+rate+`))`, "duplicates"),
			q(`sum(rate(meridian_dispatch_republished_total`+rate+`))`, "republished"),
			q(`sum by (what) (rate(meridian_agent_publish_errors_total`+rate+`))`, "agent {{what}} errors"))).
		WithRow(dashboard.NewRowBuilder("Process")).
		WithPanel(graph("Memory", "bytes", "Resident memory of each hub replica.", 12,
			q(`process_resident_memory_bytes{job="meridian-hub"}`, "{{instance}}"))).
		WithPanel(graph("Goroutines", "none", "Goroutines of each hub replica.", 12,
			q(`go_goroutines{job="meridian-hub"}`, "{{instance}}")))
}
