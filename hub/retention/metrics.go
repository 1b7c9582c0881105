package retention

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Where a pass found what it deletes (meridian_retention_choices_total).
const (
	sourceIndex = "index"
	sourceList  = "list"
	sourceCarry = "carry"
)

type metrics struct {
	deleted  *prometheus.CounterVec
	changed  prometheus.Counter
	passes   *prometheus.CounterVec
	finished prometheus.Gauge
	sources  *prometheus.CounterVec
	listed   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_retention_deleted_workloads_total",
			Help: "Finished workloads deleted by retention, by reason (ttl, queue_cap)."}, []string{"reason"}),
		changed: prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_retention_changed_total",
			Help: "Workloads chosen for deletion that changed before the delete and were kept."}),
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_retention_passes_total",
			Help: "Retention passes on the leader, by outcome (ok, error, not_leader)."}, []string{"outcome"}),
		finished: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_retention_finished_workloads",
			Help: "Finished workloads stored, as of the last retention pass on this replica."}),
		sources: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_retention_choices_total",
			Help: "Retention passes by where they found the finished workloads: index (fed by the dispatch loop), list (every stored workload read), carry (left by the pass before)."}, []string{"source"}),
		listed: prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_retention_listed_workloads_total",
			Help: "Stored workload records read by retention passes that listed."}),
	}
	// Every series exists from the start, so a rate() over it works
	// before the first delete.
	for _, r := range []Reason{ReasonTTL, ReasonQueueCap} {
		m.deleted.WithLabelValues(string(r))
	}
	for _, o := range []string{"ok", "error", "not_leader"} {
		m.passes.WithLabelValues(o)
	}
	for _, src := range []string{sourceIndex, sourceList, sourceCarry} {
		m.sources.WithLabelValues(src)
	}
	for _, c := range []prometheus.Collector{m.deleted, m.changed, m.passes, m.finished, m.sources, m.listed} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("retention: register metrics: %w", err)
		}
	}
	return m, nil
}
