package dispatch

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	cycle        prometheus.Histogram
	dispatches   prometheus.Counter
	preemptions  prometheus.Counter
	cancels      prometheus.Counter
	published    prometheus.Counter
	duplicates   prometheus.Counter
	republished  prometheus.Counter
	conflicts    prometheus.Counter
	panics       prometheus.Counter
	lostRequeues prometheus.Counter
	staleEvents  prometheus.Counter
	events       *prometheus.CounterVec
	pending      *prometheus.GaugeVec
	leader       prometheus.Gauge
	pendingCodes map[string]bool
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		cycle: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "meridian_scheduler_cycle_seconds", Help: "Duration of one scheduling cycle.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		dispatches:   prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_dispatches_total", Help: "Dispatches committed."}),
		preemptions:  prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_preemptions_total", Help: "Preemptions sent to agents."}),
		cancels:      prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_dispatch_cancels_total", Help: "DispatchCancel messages published (preemptions included)."}),
		published:    prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_dispatch_publishes_total", Help: "Dispatch publishes acknowledged by JetStream."}),
		duplicates:   prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_dispatch_publish_duplicates_total", Help: "Dispatch publishes JetStream reported as duplicates."}),
		republished:  prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_dispatch_republished_total", Help: "Unacknowledged dispatches republished on becoming leader."}),
		conflicts:    prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_scheduler_commit_conflicts_total", Help: "Commits refused because state changed."}),
		panics:       prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_scheduler_panics_total", Help: "Scheduler panics recovered."}),
		lostRequeues: prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_lost_cluster_requeues_total", Help: "Workloads requeued because their cluster was lost."}),
		staleEvents:  prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_stale_events_total", Help: "Agent events for dispatches that are not current."}),
		events:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_agent_events_total", Help: "Agent events received, by type."}, []string{"type"}),
		pending:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "meridian_pending_workloads", Help: "Pending workloads by reason code, as of the last cycle."}, []string{"reason"}),
		leader:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_scheduler_leader", Help: "1 while this replica leads."}),
		pendingCodes: map[string]bool{},
	}
	for _, c := range []prometheus.Collector{m.cycle, m.dispatches, m.preemptions, m.cancels, m.published, m.duplicates, m.republished,
		m.conflicts, m.panics, m.lostRequeues, m.staleEvents, m.events, m.pending, m.leader} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("dispatch: register metrics: %w", err)
		}
	}
	return m, nil
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
