package dispatch

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// series finds the value of one series a gatherer exports: name with
// exactly these labels (a histogram's value is its sample count). ok is
// false when no such series exists.
func series(t testing.TB, g prometheus.Gatherer, name string, labels ...string) (v float64, ok bool) {
	t.Helper()
	if len(labels)%2 != 0 {
		t.Fatalf("series %s: labels must be name, value pairs: %v", name, labels)
	}
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels)/2 {
				continue
			}
			for i := 0; i < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue(), true
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount()), true
			default:
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// dump lists a family's series, for failure messages.
func dump(t testing.TB, g prometheus.Gatherer, name string) string {
	t.Helper()
	fams, _ := g.Gather()
	var out []string
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				out = append(out, m.String())
			}
		}
	}
	sort.Strings(out)
	return name + ": " + strings.Join(out, "; ")
}

// TestStateMetricsFollowTheScenario drives the loop through a borrowing
// queue, a full cluster, a cluster-side preemption and a lost cluster, and
// checks the queue, fleet, fairness, latency and eviction metrics against
// what the scenario must produce.
func TestStateMetricsFollowTheScenario(t *testing.T) {
	e := newEnv(t, fastConfig())
	e.putQueue("acme/ml/train", 4)
	e.putQueue("acme/ml/eval", 4)
	ag := e.startAgent("east", 1, 8, 0) // 8 GPUs; work runs until stopped
	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)
	e.waitKnown(h, "east")
	reg := prometheus.NewRegistry()
	reg.MustRegister(stateCollector{h.loop})

	// train takes its 4 GPUs and borrows 2 of eval's idle quota.
	var train []*meridianv1.Workload
	for i := 0; i < 6; i++ {
		w := gpuWorkload(fmt.Sprintf("t%d", i), "acme/ml/train", 1)
		w.RequeueOnClusterLoss = i == 0
		train = append(train, w)
	}
	e.submit(train...)
	for _, w := range train {
		e.waitRunningOn(w.Id, "east", 15*time.Second)
	}
	want := func(what string, name string, v float64, labels ...string) {
		t.Helper()
		e.waitFor(fmt.Sprintf("%s: %s%v = %v", what, name, labels, v), 10*time.Second, func() bool {
			got, ok := series(t, reg, name, labels...)
			return ok && math.Abs(got-v) < 1e-9
		})
	}
	want("train holds 6", "meridian_queue_usage_gpus", 6, "queue", "acme/ml/train", "class", "h100")
	want("train's nominal", "meridian_queue_nominal_gpus", 4, "queue", "acme/ml/train", "class", "h100")
	want("train borrows 2", "meridian_queue_borrowed_gpus", 2, "queue", "acme/ml/train", "class", "h100")
	want("eval lends 2", "meridian_queue_lent_gpus", 2, "queue", "acme/ml/eval", "class", "h100")
	want("eval borrows nothing", "meridian_queue_borrowed_gpus", 0, "queue", "acme/ml/eval", "class", "h100")
	want("the parent sums its children", "meridian_queue_usage_gpus", 6, "queue", "acme/ml", "class", "h100")
	want("running count", "meridian_queue_running_workloads", 6, "queue", "acme/ml/train")
	want("capacity", "meridian_cluster_capacity_gpus", 8, "cluster", "east", "class", "h100")
	want("free after the advert", "meridian_cluster_free_gpus", 2, "cluster", "east", "class", "h100")
	want("READY", "meridian_cluster_state", 1, "cluster", "east", "state", "READY")
	want("not LOST", "meridian_cluster_state", 0, "cluster", "east", "state", "LOST")
	want("not DRAINING", "meridian_cluster_state", 0, "cluster", "east", "state", "DRAINING")
	want("running dispatches", "meridian_cluster_running_dispatches", 6, "cluster", "east")
	// Only train wants h100s, and it has less than the class holds: fair.
	want("no unfairness yet", "meridian_fairness_error", 0, "class", "h100")
	if f, ok := series(t, reg, "meridian_queue_fairshare_factor", "queue", "acme/ml/eval"); !ok || f <= 0 || f > 1 {
		t.Fatalf("eval's fairshare factor = %v (exported %v), want in (0, 1]", f, ok)
	}
	if hb, ok := series(t, reg, "meridian_cluster_last_heartbeat_timestamp_seconds", "cluster", "east"); !ok || math.Abs(hb-float64(time.Now().Unix())) > 10 {
		t.Fatalf("east's last heartbeat = %v (exported %v), want about now", hb, ok)
	}

	// eval asks for 4 GPUs; 2 are free and nothing of train may be
	// preempted, so 2 wait. Its fair share is 4 of 8, it holds 2: the
	// fairness error is 2/8.
	var eval []*meridianv1.Workload
	for i := 0; i < 4; i++ {
		eval = append(eval, gpuWorkload(fmt.Sprintf("e%d", i), "acme/ml/eval", 1))
	}
	e.submit(eval...)
	want("eval holds 2", "meridian_queue_usage_gpus", 2, "queue", "acme/ml/eval", "class", "h100")
	want("2 of eval wait", "meridian_queue_pending_workloads", 2, "queue", "acme/ml/eval")
	want("eval's short share", "meridian_fairness_error", 0.25, "class", "h100")
	// The federation's 8 GPUs of quota are all in use (train's borrowing
	// is not reclaimed: nothing is preemptible).
	e.waitFor("2 pending with QuotaExceeded", 10*time.Second, func() bool {
		return metricValue(t, h.loop.m.pending.WithLabelValues("QuotaExceeded")) == 2
	})

	// Every first dispatch was timed from submit, and every start from
	// its dispatch.
	e.waitFor("8 dispatch-to-running samples", 10*time.Second, func() bool {
		n, _ := series(t, h.loop.gatherer(), "meridian_workload_dispatch_to_running_seconds")
		return n == 8
	})
	var dispatched float64
	for _, code := range pendingReasonCodes {
		n, _ := series(t, h.loop.gatherer(), "meridian_workload_submit_to_dispatch_seconds", "pending_reason", code)
		dispatched += n
	}
	if dispatched != 8 {
		t.Fatalf("submit-to-dispatch samples = %v, want 8 (%s)", dispatched, dump(t, h.loop.gatherer(), "meridian_workload_submit_to_dispatch_seconds"))
	}

	// The cluster's own scheduler preempts t1: an eviction the hub did
	// not ask for.
	w1, _ := e.workload("t1")
	if err := ag.event(w1.GetStatus().GetDispatchId(), "t1", agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_PREEMPTED, "node drained by the cluster"); err != nil {
		t.Fatal(err)
	}
	e.waitFor("a cluster preemption", 10*time.Second, func() bool {
		return metricValue(t, h.loop.m.evictions.WithLabelValues(evictClusterPreemption)) == 1
	})
	if n := metricValue(t, h.loop.m.evictions.WithLabelValues(evictHubPreemption)); n != 0 {
		t.Fatalf("hub preemptions counted as evictions: %v", n)
	}

	// The cluster goes silent: LOST. t0 asks to be requeued on cluster
	// loss (an eviction); the rest keep running there.
	ag.vanish()
	want("LOST", "meridian_cluster_state", 1, "cluster", "east", "state", "LOST")
	want("not READY", "meridian_cluster_state", 0, "cluster", "east", "state", "READY")
	e.waitFor("an eviction by cluster loss", 10*time.Second, func() bool {
		return metricValue(t, h.loop.m.evictions.WithLabelValues(evictClusterLost)) == 1
	})

	// A follower exports none of the state gauges (the leader does).
	h.kill()
	if _, ok := series(t, reg, "meridian_queue_usage_gpus", "queue", "acme/ml/train", "class", "h100"); ok {
		t.Fatal("a replica that does not lead still exports queue gauges")
	}
	if n := metricValue(t, h.loop.m.pending.WithLabelValues("QuotaExceeded")); n != 0 {
		t.Fatalf("pending{QuotaExceeded} = %v after the term ended, want 0", n)
	}
}

// gatherer is the loop's private registry (the harness passes none).
func (l *Loop) gatherer() prometheus.Gatherer { return l.ownReg }
