package dispatch

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-gpu/meridian/hub/scheduler"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

type metrics struct {
	cycle        prometheus.Histogram
	dispatches   prometheus.Counter
	preemptions  *prometheus.CounterVec
	evictions    *prometheus.CounterVec
	toDispatch   *prometheus.HistogramVec
	toRunning    prometheus.Histogram
	cancels      prometheus.Counter
	published    prometheus.Counter
	duplicates   prometheus.Counter
	batches      prometheus.Counter
	republished  prometheus.Counter
	conflicts    prometheus.Counter
	panics       prometheus.Counter
	lostRequeues prometheus.Counter
	staleEvents  prometheus.Counter
	forgedEvents prometheus.Counter
	events       *prometheus.CounterVec
	pending      *prometheus.GaugeVec
	leader       prometheus.Gauge
	pendingCodes map[string]bool
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		cycle: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "meridian_scheduler_cycle_seconds", Help: "Duration of one scheduling cycle.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		dispatches: prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_dispatches_total", Help: "Dispatches committed."}),
		preemptions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_preemptions_total",
			Help: "Preemptions sent to agents, by the rule that chose the victim (priority, reclaim)."}, []string{"reason"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_evictions_total",
			Help: "Started work that stopped before it finished and went back to the queue, by reason (hub_preemption, cluster_preemption, cluster_lost)."}, []string{"reason"}),
		toDispatch: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "meridian_workload_submit_to_dispatch_seconds",
			Help:    "Time from a workload's submit to its first dispatch, by the last pending reason code it had (WaitingForScheduler: it never waited for quota or room).",
			Buckets: latencyBuckets}, []string{"pending_reason"}),
		toRunning: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "meridian_workload_dispatch_to_running_seconds",
			Help: "Time from a dispatch to the agent's report that the workload runs.", Buckets: latencyBuckets}),
		cancels:    prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_dispatch_cancels_total", Help: "DispatchCancel messages published (preemptions included)."}),
		published:  prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_dispatch_publishes_total", Help: "Dispatch publishes acknowledged by JetStream."}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_dispatch_publish_duplicates_total", Help: "Dispatch publishes JetStream reported as duplicates."}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_dispatch_batch_messages_total",
			Help: "Messages that carried several dispatches to one cluster (to agents that read them)."}),
		republished:  prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_dispatch_republished_total", Help: "Unacknowledged dispatches republished on becoming leader."}),
		conflicts:    prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_scheduler_commit_conflicts_total", Help: "Commits refused because state changed."}),
		panics:       prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_scheduler_panics_total", Help: "Scheduler panics recovered."}),
		lostRequeues: prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_lost_cluster_requeues_total", Help: "Workloads requeued because their cluster was lost."}),
		staleEvents:  prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_stale_events_total", Help: "Agent events for dispatches that are not current."}),
		forgedEvents: prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_forged_events_total", Help: "Agent events dropped because their body names another cluster than the subject they were published on."}),
		events:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_agent_events_total", Help: "Agent events received, by type."}, []string{"type"}),
		pending:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "meridian_pending_workloads", Help: "Pending workloads by reason code, as of the last cycle."}, []string{"reason"}),
		leader:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_scheduler_leader", Help: "1 while this replica leads."}),
		pendingCodes: map[string]bool{},
	}
	// Every labelled series exists from the start, so rate() and the
	// dashboards work before the first event of each kind.
	for _, r := range []scheduler.PreemptRule{scheduler.PreemptPriority, scheduler.PreemptReclaim} {
		m.preemptions.WithLabelValues(r.String())
	}
	for _, r := range evictionReasons {
		m.evictions.WithLabelValues(r)
	}
	for _, c := range pendingReasonCodes {
		m.pending.WithLabelValues(c)
		m.pendingCodes[c] = true
		m.toDispatch.WithLabelValues(c)
	}
	for _, c := range []prometheus.Collector{m.cycle, m.dispatches, m.preemptions, m.evictions, m.toDispatch, m.toRunning, m.cancels, m.published, m.duplicates, m.batches, m.republished,
		m.conflicts, m.panics, m.lostRequeues, m.staleEvents, m.forgedEvents, m.events, m.pending, m.leader} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("dispatch: register metrics: %w", err)
		}
	}
	return m, nil
}

// latencyBuckets span a dispatch in its first cycle (10ms) to a day's wait.
var latencyBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400}

// Eviction reasons (meridian_evictions_total).
const (
	evictHubPreemption     = "hub_preemption"
	evictClusterPreemption = "cluster_preemption"
	evictClusterLost       = "cluster_lost"
)

var evictionReasons = []string{evictHubPreemption, evictClusterPreemption, evictClusterLost}

// pendingReasonCodes are every pending reason code a workload can carry.
var pendingReasonCodes = func() []string {
	out := []string{CodeWaitingForScheduler}
	for c := scheduler.ReasonQuota; c <= scheduler.ReasonNeverFits; c++ {
		out = append(out, c.String())
	}
	return out
}()

// knownPendingCode maps a stored pending reason code to its metric label:
// itself when known, WaitingForScheduler when empty (nothing decided yet),
// else "Unknown" (labels stay a fixed, small set).
func knownPendingCode(code string) string {
	if code == "" {
		return CodeWaitingForScheduler
	}
	for _, c := range pendingReasonCodes {
		if c == code {
			return c
		}
	}
	return scheduler.ReasonCode(0).String()
}

// resetPending zeroes the per-reason counts when this replica stops
// leading, so a follower does not keep exporting its last term's figures.
func (m *metrics) resetPending() {
	for code := range m.pendingCodes {
		m.pending.WithLabelValues(code).Set(0)
	}
}

// setPending publishes the per-reason counts, zeroing reasons that vanished.
// Only the loop goroutine calls it.
func (m *metrics) setPending(counts map[string]int) {
	for code := range m.pendingCodes {
		if _, ok := counts[code]; !ok {
			m.pending.WithLabelValues(code).Set(0)
		}
	}
	for code, n := range counts {
		m.pendingCodes[code] = true
		m.pending.WithLabelValues(code).Set(float64(n))
	}
}

// submitWait returns what to observe once w's first dispatch commits: its
// time since submit, labelled by the last pending reason code it carried.
// A redispatch after a requeue observes nothing (its wait began at the
// requeue, which the workload does not record).
func (l *Loop) submitWait(w *meridianv1.Workload, now time.Time) func() {
	if w.GetStatus().GetAttempts() > 0 || w.GetCreateTime() == nil {
		return func() {}
	}
	wait := max(0, now.Sub(w.GetCreateTime().AsTime())).Seconds()
	code := knownPendingCode(w.GetStatus().GetPendingReasonCode())
	return func() { l.m.toDispatch.WithLabelValues(code).Observe(wait) }
}
