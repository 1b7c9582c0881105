package dispatch

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-gpu/meridian/hub/quota"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// stateCollector exports the queue tree, the fleet and the fairness error
// as gauges, computed at scrape time from what the loop already holds: the
// accounting the API's queue view uses (currentView, reused briefly, built
// from the in-memory mirror) and the fleet registry. A scrape reads nothing
// from etcd.
//
// Only the leader exports them, so that summing over every hub replica
// counts each queue and cluster once; a follower's mirror and fleet are
// as fresh, but its ledger is not.
type stateCollector struct{ l *Loop }

var (
	queueLabels   = []string{"queue", "class"}
	clusterLabels = []string{"cluster", "class"}

	descQueueUsage = prometheus.NewDesc("meridian_queue_usage_gpus",
		"GPUs the queue's subtree holds now (admitted, running work), by accelerator class.", queueLabels, nil)
	descQueueNominal = prometheus.NewDesc("meridian_queue_nominal_gpus",
		"The queue's effective nominal quota, by accelerator class.", queueLabels, nil)
	descQueueBorrowLimit = prometheus.NewDesc("meridian_queue_borrowing_limit_gpus",
		"How far above nominal the queue may borrow, by accelerator class; absent when unlimited.", queueLabels, nil)
	descQueueBorrowed = prometheus.NewDesc("meridian_queue_borrowed_gpus",
		"GPUs the queue's subtree holds above its nominal quota (borrowed from other queues), by accelerator class.", queueLabels, nil)
	descQueueLent = prometheus.NewDesc("meridian_queue_lent_gpus",
		"GPUs of the queue's idle nominal quota that other queues hold now, by accelerator class.", queueLabels, nil)
	descQueueFair = prometheus.NewDesc("meridian_queue_fairshare_factor",
		"Fair Tree fairshare factor of a leaf queue, in (0, 1]; 1 is the most deserving queue.", []string{"queue"}, nil)
	descQueueDecayed = prometheus.NewDesc("meridian_queue_decayed_usage_gpu_seconds",
		"The queue's decayed GPU-seconds in the fairshare ledger (class weights applied).", []string{"queue"}, nil)
	descQueuePending = prometheus.NewDesc("meridian_queue_pending_workloads",
		"Queued workloads of a leaf queue.", []string{"queue"}, nil)
	descQueueRunning = prometheus.NewDesc("meridian_queue_running_workloads",
		"Dispatched or running workloads of a leaf queue.", []string{"queue"}, nil)
	descFairness = prometheus.NewDesc("meridian_fairness_error",
		"Armada's fairness error per accelerator class: the share of the class's capacity by which leaf queues fall short of their demand-capped weighted fair share (0 is fair, 1 is as unfair as it gets).", []string{"class"}, nil)

	descClusterCapacity = prometheus.NewDesc("meridian_cluster_capacity_gpus",
		"GPUs installed on the cluster's schedulable nodes, by accelerator class, as last advertised.", clusterLabels, nil)
	descClusterFree = prometheus.NewDesc("meridian_cluster_free_gpus",
		"GPUs free on the cluster now (fractions included), by accelerator class, as last advertised.", clusterLabels, nil)
	descClusterState = prometheus.NewDesc("meridian_cluster_state",
		"The cluster's state as a state set: 1 for the state it is in (READY, LOST or DRAINING), 0 for the others.", []string{"cluster", "state"}, nil)
	descClusterHeartbeat = prometheus.NewDesc("meridian_cluster_last_heartbeat_timestamp_seconds",
		"When the cluster's last heartbeat arrived, in seconds since the epoch.", []string{"cluster"}, nil)
	descClusterRunning = prometheus.NewDesc("meridian_cluster_running_dispatches",
		"Dispatches the cluster's agent last reported launched or running.", []string{"cluster"}, nil)

	stateDescs = []*prometheus.Desc{descQueueUsage, descQueueNominal, descQueueBorrowLimit, descQueueBorrowed, descQueueLent,
		descQueueFair, descQueueDecayed, descQueuePending, descQueueRunning, descFairness,
		descClusterCapacity, descClusterFree, descClusterState, descClusterHeartbeat, descClusterRunning}
)

// clusterStates are the values of meridian_cluster_state's state label.
var clusterStates = []struct {
	s    meridianv1.ClusterState
	name string
}{
	{meridianv1.ClusterState_CLUSTER_STATE_READY, "READY"},
	{meridianv1.ClusterState_CLUSTER_STATE_LOST, "LOST"},
	{meridianv1.ClusterState_CLUSTER_STATE_DRAINING, "DRAINING"},
}

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range stateDescs {
		ch <- d
	}
}

func gpus(milli int64) float64 { return float64(milli) / 1000 }

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	if _, leading := c.l.Leading(); !leading {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	capacity := c.collectFleet(gauge)
	c.collectQueues(gauge, capacity)
}

// collectFleet exports the cluster gauges and returns the capacity per
// class of the clusters that are not lost, for the fairness error.
func (c stateCollector) collectFleet(gauge func(*prometheus.Desc, float64, ...string)) map[string]int64 {
	capacity := map[string]int64{}
	for _, cl := range c.l.ListClusters() {
		id := cl.GetId()
		for _, st := range clusterStates {
			v := 0.0
			if cl.GetState() == st.s {
				v = 1
			}
			gauge(descClusterState, v, id, st.name)
		}
		if hb := cl.GetLastHeartbeat(); hb != nil {
			gauge(descClusterHeartbeat, float64(hb.AsTime().UnixNano())/1e9, id)
		}
		gauge(descClusterRunning, float64(cl.GetRunningDispatches()), id)
		for _, cc := range cl.GetCapacity() {
			class := cc.GetAcceleratorClass()
			gauge(descClusterCapacity, gpus(cc.GetTotalMilli()), id, class)
			gauge(descClusterFree, gpus(cc.GetFreeMilli()), id, class)
			if cl.GetState() != meridianv1.ClusterState_CLUSTER_STATE_LOST {
				capacity[class] += cc.GetTotalMilli()
			}
		}
	}
	return capacity
}

func (c stateCollector) collectQueues(gauge func(*prometheus.Desc, float64, ...string), capacity map[string]int64) {
	v := c.l.currentView()
	t := v.tree
	if t == nil {
		return
	}
	classes := t.Classes()
	for _, q := range t.Queues() {
		for _, cls := range classes {
			u := t.Usage(q, cls)
			lim, _ := t.Limits(q, cls)
			if u == 0 && lim.Nominal == 0 {
				continue
			}
			gauge(descQueueUsage, gpus(u), q, cls)
			gauge(descQueueNominal, gpus(lim.Nominal), q, cls)
			if lim.BorrowLimit >= 0 && lim.BorrowLimit <= quota.MaxMilli {
				gauge(descQueueBorrowLimit, gpus(lim.BorrowLimit), q, cls)
			}
			gauge(descQueueBorrowed, gpus(t.Borrowing(q, cls)), q, cls)
			gauge(descQueueLent, gpus(t.Lent(q, cls)), q, cls)
		}
		if v.ledger != nil {
			gauge(descQueueDecayed, v.ledger.Usage(q, v.at), q)
		}
		if t.Leaf(q) {
			gauge(descQueueFair, v.fair[q], q)
			gauge(descQueuePending, float64(v.pending[q]), q)
			gauge(descQueueRunning, float64(v.running[q]), q)
		}
	}
	// The fairness error of every class that has capacity or usage.
	seen := map[string]bool{}
	for _, cls := range append(classes, sortedKeys(capacity)...) {
		if seen[cls] || cls == quota.AnyClass || strings.TrimSpace(cls) == "" {
			continue
		}
		seen[cls] = true
		usage := map[string]int64{}
		demand := map[string]int64{}
		for _, leaf := range t.Leaves() {
			u := t.Usage(leaf, cls)
			if u > 0 {
				usage[leaf] = u
			}
			if d := u + v.demand[cls][leaf]; d > 0 {
				demand[leaf] = d
			}
		}
		if len(usage) == 0 && capacity[cls] == 0 {
			continue
		}
		gauge(descFairness, quota.FairnessError(t, usage, demand, capacity[cls]), cls)
	}
}
