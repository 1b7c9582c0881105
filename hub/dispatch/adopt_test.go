package dispatch

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	"github.com/meridian-gpu/meridian/transport/natsbus"
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

// TestSettleRunsThatEndedAfterTheSnapshot: etcd holds w1 and w2 as
// running on c1 (as a snapshot taken while they ran would), but on the
// cluster w1's run has since succeeded and w2's is forgotten, and the
// hub that applied their last events is gone with the state it wrote.
// After a restore the hub asks the cluster about each run it holds as
// running that the cluster's first heartbeat does not list: w1 ends as
// the agent remembers it (SUCCEEDED), w2 ends CANCELLED with a message
// that says why, and w3, which the heartbeat lists, is left running.
// Without AfterRestore nothing asks, and w1 and w2 stay RUNNING.
func TestSettleRunsThatEndedAfterTheSnapshot(t *testing.T) {
	for _, afterRestore := range []bool{true, false} {
		name := "after-restore"
		if !afterRestore {
			name = "plain"
		}
		t.Run(name, func(t *testing.T) {
			cfg := fastConfig()
			e := newEnv(t, cfg)
			e.putQueue("team/a", 16)
			a := e.startAgent("c1", 2, 8, 0)
			e.submit(gpuWorkload("w1", "team/a", 1), gpuWorkload("w2", "team/a", 1), gpuWorkload("w3", "team/a", 1))
			h := e.startHub("hub-a")
			e.waitFor("leadership", 10*time.Second, h.leading)
			d1 := e.waitRunningOn("w1", "c1", 10*time.Second)
			d2 := e.waitRunningOn("w2", "c1", 10*time.Second)
			e.waitRunningOn("w3", "c1", 10*time.Second)
			h.kill()
			// The runs end on the cluster without a word to the new hub.
			a.mu.Lock()
			a.releaseLocked(d1)
			a.releaseLocked(d2)
			a.ended[d1] = agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_SUCCEEDED
			a.mu.Unlock()
			a.advertise()

			e.cfg.AfterRestore = afterRestore
			h2 := e.startHub("hub-b")
			e.waitFor("leadership", 10*time.Second, h2.leading)
			if !afterRestore {
				time.Sleep(10 * cfg.MaxIdle) // cycles and heartbeats
				for _, id := range []string{"w1", "w2"} {
					if w, _ := e.workload(id); w.GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING {
						t.Fatalf("%s: %s without AfterRestore, want it left RUNNING", id, w.GetStatus().GetPhase())
					}
				}
				return
			}
			phase := func(id string) meridianv1.WorkloadPhase {
				w, _ := e.workload(id)
				return w.GetStatus().GetPhase()
			}
			e.waitFor("w1 settled", 10*time.Second, func() bool { return phase("w1") == meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED })
			e.waitFor("w2 settled", 10*time.Second, func() bool { return phase("w2") == meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED })
			if w2, _ := e.workload("w2"); !strings.Contains(w2.GetStatus().GetMessage(), "after a restore") {
				t.Fatalf("w2's message %q does not say it was settled after a restore", w2.GetStatus().GetMessage())
			}
			time.Sleep(5 * cfg.MaxIdle)
			if p := phase("w3"); p != meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING {
				t.Fatalf("w3, which its cluster lists, is %s, want RUNNING", p)
			}
			if n := a.cancelCount(e.waitRunningOn("w3", "c1", time.Second)); n != 0 {
				t.Fatalf("w3's run was cancelled %d times", n)
			}
		})
	}
}

// TestTermStartsOnceTheFleetIsRead: a hub campaigns only after it has read
// the latest advertisement of every cluster the bus holds, so a term
// never starts believing in fewer clusters than there are. After a
// restore that belief decides what the first dispatch waits for: a
// cluster not read yet sends no heartbeat the hub waits for, and work it
// runs that etcd did not know would be dispatched a second time instead
// of adopted (TestAdoptAfterRestore failed that way now and then).
func TestTermStartsOnceTheFleetIsRead(t *testing.T) {
	cfg := fastConfig()
	cfg.AfterRestore = true
	e := newEnv(t, cfg)
	bus, err := natsbus.Connect(e.ctx, e.url, natsbus.WithName("adverts"))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	if err := bus.EnsureStreams(e.ctx); err != nil {
		t.Fatal(err)
	}
	const clusters = 300
	for c := range clusters {
		id := fmt.Sprintf("c%03d", c)
		ad := &agentv1.Advertisement{ClusterId: id, Seq: 1, SentAt: timestamppb.Now(), SessionId: "s-" + id, Nodes: clusterNodes(id, 8, 8)}
		b, err := proto.Marshal(ad)
		if err != nil {
			t.Fatal(err)
		}
		if err := bus.PublishAdvert(e.ctx, id, b); err != nil {
			t.Fatal(err)
		}
	}
	h := e.startHub("hub-a")
	for !h.leading() {
		if e.ctx.Err() != nil {
			t.Fatal("no leadership")
		}
		time.Sleep(time.Millisecond)
	}
	if n := len(h.loop.fleet.IDs()); n != clusters {
		t.Fatalf("the term began knowing %d of the %d clusters the bus held", n, clusters)
	}
}
