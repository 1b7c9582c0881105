package dispatch

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

func fastConfig() Config {
	return Config{MinPeriod: 20 * time.Millisecond, MaxIdle: 200 * time.Millisecond, ClusterTimeout: 1500 * time.Millisecond,
		RepublishAfter: 2 * time.Second, RejectBackoff: 5 * time.Second, LedgerPersistEvery: 300 * time.Millisecond, AccrueEvery: 100 * time.Millisecond, EventAckWait: 2 * time.Second}
}

func TestSubmitToSucceeded(t *testing.T) {
	e := newEnv(t, fastConfig())
	e.putQueue("acme/ml/train", 4) // 4 GPUs of quota: two 2-GPU workloads at a time
	ag := e.startAgent("east", 2, 4, 300*time.Millisecond)
	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)

	var ws []*meridianv1.Workload
	for i := 0; i < 6; i++ {
		ws = append(ws, gpuWorkload(fmt.Sprintf("w%d", i), "acme/ml/train", 2))
	}
	lost := gpuWorkload("orphan", "acme/ml/nope", 1)
	e.submit(append(ws, lost)...)

	// Quota holds at every moment: never more than two running at once.
	maxRunning := 0
	e.waitFor("all six to succeed", 30*time.Second, func() bool {
		n := len(ag.runningIDs())
		maxRunning = max(maxRunning, n)
		return e.countPhase(meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED) == 6
	})
	if maxRunning > 2 {
		t.Fatalf("%d workloads ran at once on a 4-GPU quota of 2-GPU workloads", maxRunning)
	}
	for id, w := range e.workloads() {
		if id == "orphan" {
			continue
		}
		st := w.GetStatus()
		if st.GetCluster() != "east" || st.GetDispatchId() == "" || st.GetAttempts() != 1 || st.GetEndTime() == nil || st.GetExitCode() != 0 || st.ExitCode == nil {
			t.Fatalf("%s status after success = %v", id, st)
		}
	}
	byW := ag.checkLaunchedOnce(t)
	for _, w := range ws {
		if len(byW[w.Id]) != 1 {
			t.Fatalf("%s launched under %d dispatch ids", w.Id, len(byW[w.Id]))
		}
	}
	if n := e.dispatchRecords(); n != 0 {
		t.Fatalf("%d dispatch records left after every workload finished", n)
	}
	// Quota released: the leader's accounting shows no usage.
	e.waitFor("quota released", 5*time.Second, func() bool {
		qs := h.loop.QueueStatus("acme/ml/train")
		return qs != nil && qs.RunningWorkloads == 0 && qs.Classes[0].UsageMilli == 0
	})
	// The ledger holds the GPU-seconds the workloads ran (a 7-day half-life
	// makes decay over a few seconds negligible).
	var ran float64
	for id, w := range e.workloads() {
		if id != "orphan" {
			ran += 2 * w.GetStatus().GetEndTime().AsTime().Sub(w.GetStatus().GetStartTime().AsTime()).Seconds()
		}
	}
	got := h.loop.QueueStatus("acme/ml/train").Classes[0].GetDecayedGpuSeconds()
	if ran <= 0 || got < 0.9*ran || got > 1.1*ran {
		t.Fatalf("ledger has %.3f GPU-seconds for the queue, the workloads ran %.3f", got, ran)
	}
	if qs := h.loop.QueueStatus("acme/ml/nope"); qs != nil {
		t.Fatalf("unknown queue has a status: %v", qs)
	}

	// The workload in an unknown queue waits with a reason written once.
	e.waitFor("pending reason", 5*time.Second, func() bool {
		w, _ := e.workload("orphan")
		return strings.Contains(w.GetStatus().GetPendingReason(), "acme/ml/nope")
	})
	_, rev1 := e.workload("orphan")
	time.Sleep(600 * time.Millisecond) // several cycles
	w, rev2 := e.workload("orphan")
	if rev1 != rev2 {
		t.Fatalf("unchanged pending reason rewritten: mod revision %d -> %d (%q)", rev1, rev2, w.GetStatus().GetPendingReason())
	}
	if w.GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED {
		t.Fatalf("orphan phase = %v", w.GetStatus().GetPhase())
	}
	if c := w.GetStatus().GetPendingReasonCode(); c != "Invalid" {
		t.Fatalf("orphan pending reason code = %q, want Invalid", c)
	}

	// Explain names the reason and has a line for the cluster.
	ex, err := h.loop.Explain(e.ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ex.GetPendingReason(), "acme/ml/nope") || len(ex.GetClusters()) != 1 || ex.GetClusters()[0].GetCluster() != "east" {
		t.Fatalf("explain = %v", ex)
	}

	// Metrics count what happened.
	if got := metricValue(t, h.loop.m.dispatches); got != 6 {
		t.Fatalf("dispatches metric = %v, want 6", got)
	}
	if got, dup := metricValue(t, h.loop.m.published), metricValue(t, h.loop.m.duplicates); got != 6 || dup != 0 {
		t.Fatalf("publishes = %v (duplicates %v), want each dispatch published once", got, dup)
	}
	if got := metricValue(t, h.loop.m.pending.WithLabelValues("Invalid")); got != 1 {
		t.Fatalf("pending{Invalid} = %v, want 1 (the orphan)", got)
	}
	var hm dto.Metric
	if err := h.loop.m.cycle.Write(&hm); err != nil || hm.GetHistogram().GetSampleCount() == 0 {
		t.Fatalf("cycle histogram has no samples (%v)", err)
	}

	// The ledger was persisted with usage for the queue.
	b, _, err := e.st.Get(e.ctx, LedgerKey)
	if err != nil {
		t.Fatalf("ledger not persisted: %v", err)
	}
	if !strings.Contains(string(b), "acme/ml/train") {
		t.Fatalf("ledger has no usage for the queue: %s", b)
	}
	_ = store.Root
}

func metricValue(t testing.TB, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.Counter != nil {
		return d.GetCounter().GetValue()
	}
	return d.GetGauge().GetValue()
}
