package dispatch

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// The events' copy equals the workload in every field, shares all but the
// status, and owns its status and conditions: a field added to Workload
// and not listed in shareButStatus, or to WorkloadStatus and not listed
// in shareButConditions, fails the first check.
func TestShareButStatusCopiesEveryField(t *testing.T) {
	w := &meridianv1.Workload{}
	fillEveryField(w.ProtoReflect(), 3)
	for _, f := range []string{"pod_sets", "labels", "cluster_selector", "runtime", "status"} {
		if !w.ProtoReflect().Has(w.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(f))) {
			t.Fatalf("the filled workload lacks %s: the check below would not see it", f)
		}
	}
	if len(w.GetStatus().GetConditions()) == 0 {
		t.Fatal("the filled status has no conditions: its deep copy is hardly checked")
	}
	c := shareButStatus(w)
	if !proto.Equal(c, w) {
		t.Fatalf("the copy differs from the workload:\n copy %v\n want %v", c, w)
	}
	if c.PodSets[0] != w.PodSets[0] || c.Runtime != w.Runtime {
		t.Fatal("the copy does not share the pod sets or the runtime template")
	}
	if c.Status == w.Status || c.Status.Conditions[0] == w.Status.Conditions[0] {
		t.Fatal("the copy shares its status or its conditions with the workload")
	}
	if c.Status.Placement != w.Status.Placement || c.Status.Assignment[0] != w.Status.Assignment[0] {
		t.Fatal("the copy's status does not share the placement decision or the assignment")
	}
	before := proto.Clone(w)
	c.Status.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED
	c.Status.Conditions[0].Message = "changed"
	c.Status.Conditions = append(c.Status.Conditions, &meridianv1.Condition{Type: "More"})
	if !proto.Equal(w, before) {
		t.Fatal("changing the copy's status changed the workload")
	}

	// Fields this hub does not know are kept: the copy is then whole.
	u := proto.Clone(w).(*meridianv1.Workload)
	u.ProtoReflect().SetUnknown(protoreflect.RawFields{0xf8, 0x06, 0x01}) // field 111, varint 1
	cu := shareButStatus(u)
	if !proto.Equal(cu, u) {
		t.Fatal("the copy of a workload with unknown fields lost them")
	}
	// So are the status's.
	us := proto.Clone(w).(*meridianv1.Workload)
	us.Status.ProtoReflect().SetUnknown(protoreflect.RawFields{0xf8, 0x06, 0x01})
	if cus := shareButStatus(us); !proto.Equal(cus, us) || cus.Status.Placement == us.Status.Placement {
		t.Fatal("a status with unknown fields was not copied whole")
	}
	if shareButStatus(nil) != nil {
		t.Fatal("a copy of nil is not nil")
	}
}

// The guard finds a kept workload changed through a copy's shared fields,
// and nothing when only the copy's status changed.
func TestWriteGuardFindsSharedFieldsChanged(t *testing.T) {
	guard := newWriteGuard()
	r := recentWrites{guard: guard}
	put := func(key string, rev int64) {
		r.put(key, rev, &meridianv1.Workload{Id: key, Labels: map[string]string{"a": "1"},
			Status: &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED}})
	}
	put("ok", 5)
	c := r.copyAt("ok", 5)
	c.Status.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING
	r.put("ok", 6, c)
	if f := guard.Failures(); len(f) != 0 {
		t.Fatalf("a status change was taken for a shared one: %v", f)
	}

	put("bad", 5)
	c = r.copyAt("bad", 5)
	c.Labels["a"] = "2" // shared with the entry
	r.drop("bad")
	f := guard.Failures()
	if len(f) != 1 || !strings.Contains(f[0], "bad at revision 5") {
		t.Fatalf("a change to a shared field went unseen: %v", f)
	}
}

var copySink *meridianv1.Workload

// BenchmarkEventCopy: the copy an event transaction starts from, for the
// load generator's workload as dispatched and running: whole (CloneVT)
// against sharing all but the status.
func BenchmarkEventCopy(b *testing.B) {
	ts := func(s int64) *timestamppb.Timestamp { return &timestamppb.Timestamp{Seconds: s} }
	w := &meridianv1.Workload{
		Id: "0b9d3c6e-8f4a-4c1e-9a57-2f1d3e4b5c6d", Name: "w-000123", Queue: "bench/load", Preemptible: true,
		Labels: map[string]string{"meridian.dev/sim-duration": "5s"},
		PodSets: []*meridianv1.PodSet{{Name: "main", Replicas: 1, Resources: &meridianv1.Resources{
			GpuMilli: 1000, CpuMilli: 1000, MemoryMib: 1024, AcceleratorClass: "nvidia-h100-80gb"}}},
		CreateTime: ts(100), SubmittedBy: "bench",
		Status: &meridianv1.WorkloadStatus{
			Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING, Cluster: "c3", DispatchId: "d-0b9d3c6e-1",
			Attempts: 1, DispatchTime: ts(101), AcceptTime: ts(101), StartTime: ts(101), UpdateTime: ts(101),
			Assignment:   []*meridianv1.PodSetAssignment{{PodSet: "main", Replicas: []*meridianv1.ReplicaAssignment{{Node: "c3-n7", Gpus: []int32{2}}}}},
			QuotaCharge:  []*meridianv1.ClassCharge{{AcceleratorClass: "nvidia-h100-80gb", MilliGpus: 1000}},
			DispatchTerm: 3,
		},
	}
	for _, c := range []struct {
		name string
		copy func(*meridianv1.Workload) *meridianv1.Workload
	}{{"clone", cloneWorkload}, {"share-but-status", shareButStatus}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				copySink = c.copy(w)
			}
		})
	}
}

// deepGuard keeps a deep copy of each workload recentWrites holds and
// records every entry found changed since it was put: the rule that
// nobody changes a kept workload, which copies that share its fields rely
// on, made checkable. Tests only; it costs a deep copy and a comparison per
// entry.
type deepGuard struct {
	mu       sync.Mutex
	kept     map[guardKey]*meridianv1.Workload
	failures []string
}

type guardKey struct {
	key string
	rev int64
}

func newWriteGuard() *deepGuard {
	return &deepGuard{kept: map[guardKey]*meridianv1.Workload{}}
}

func (g *deepGuard) keep(key string, rev int64, w *meridianv1.Workload) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.kept[guardKey{key, rev}] = cloneWorkload(w)
}

// check records a failure when e no longer equals what was put.
func (g *deepGuard) check(key string, e ownWrite) {
	g.mu.Lock()
	defer g.mu.Unlock()
	want, ok := g.kept[guardKey{key, e.rev}]
	if ok && !proto.Equal(want, e.w) {
		g.failures = append(g.failures, fmt.Sprintf("the workload kept for %s at revision %d changed after it was put (was %v, now %v)", key, e.rev, want, e.w))
	}
}

func (g *deepGuard) release(key string, rev int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.kept, guardKey{key, rev})
}

// Failures returns what check found.
func (g *deepGuard) Failures() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.failures...)
}
