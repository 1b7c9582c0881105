package dispatch

import (
	"testing"
	"time"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// TestAdoptAfterRestore: etcd holds w1 as QUEUED (as a snapshot taken
// before its dispatch would) while its cluster runs it under a dispatch
// etcd never saw. After a restore the hub waits for the cluster's
// heartbeat, adopts that run (w1 RUNNING there under the agent's dispatch
// id, never launched again, never cancelled) and dispatches the rest as
// usual. Without AfterRestore the same state ends with the run cancelled
// and w1 launched again, which is what the mode is for.
func TestAdoptAfterRestore(t *testing.T) {
	for _, afterRestore := range []bool{true, false} {
		name := "after-restore"
		if !afterRestore {
			name = "plain"
		}
		t.Run(name, func(t *testing.T) {
			cfg := fastConfig()
			cfg.AfterRestore = afterRestore
			e := newEnv(t, cfg)
			e.putQueue("team/a", 16)
			a := e.startAgent("c1", 2, 8, 0)
			// The run etcd does not know: 8 GPUs of node 0.
			a.mu.Lock()
			r := &running{workload: "w1", milli: 1000}
			for g := range 8 {
				a.nodes[0].Gpus[g].FreeMilli = 0
				r.used = append(r.used, [2]int{0, g})
			}
			a.run["d-after-snapshot"] = r
			a.mu.Unlock()
			a.advertise()
			e.submit(gpuWorkload("w1", "team/a", 8), gpuWorkload("w2", "team/a", 8))
			h := e.startHub("hub-a")
			e.waitFor("leadership", 10*time.Second, h.leading)

			if !afterRestore {
				e.waitFor("the unknown run cancelled", 10*time.Second, func() bool { return a.cancelCount("d-after-snapshot") > 0 })
				e.waitFor("w1 launched again", 10*time.Second, func() bool {
					w, _ := e.workload("w1")
					return w.GetStatus().GetDispatchId() != "" && w.GetStatus().GetDispatchId() != "d-after-snapshot"
				})
				return
			}
			e.waitFor("w1 adopted", 10*time.Second, func() bool {
				w, _ := e.workload("w1")
				return w.GetStatus().GetPhase() == meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING && w.GetStatus().GetDispatchId() == "d-after-snapshot"
			})
			e.waitRunningOn("w2", "c1", 10*time.Second)
			time.Sleep(5 * cfg.MaxIdle) // more cycles and heartbeats
			w1, _ := e.workload("w1")
			if st := w1.GetStatus(); st.GetCluster() != "c1" || st.GetAttempts() != 1 || len(st.GetQuotaCharge()) != 1 || st.GetQuotaCharge()[0].GetMilliGpus() != 8000 {
				t.Fatalf("adopted w1: cluster %q, attempts %d, quota charge %v", st.GetCluster(), st.GetAttempts(), st.GetQuotaCharge())
			}
			if n := a.cancelCount("d-after-snapshot"); n != 0 {
				t.Fatalf("the adopted run was cancelled %d times", n)
			}
			a.mu.Lock()
			relaunched := len(a.byWorkload["w1"])
			a.mu.Unlock()
			if relaunched != 0 {
				t.Fatalf("w1 launched again %d times beside the run it has", relaunched)
			}
			if st := h.loop.QueueStatus("team/a"); st.GetRunningWorkloads() != 2 {
				t.Fatalf("queue status: %d running, want 2 (w1 adopted, w2)", st.GetRunningWorkloads())
			}
		})
	}
}
