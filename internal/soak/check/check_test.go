package check

import (
	"reflect"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

const class = "nvidia-h100-80gb"

func put(rev int64, id, queue string, phase meridianv1.WorkloadPhase, dispatch string, term, milli int64, reason string) *clientv3.Event {
	w := &meridianv1.Workload{Id: id, Queue: queue, Status: &meridianv1.WorkloadStatus{Phase: phase, DispatchId: dispatch, DispatchTerm: term,
		Cluster: "sim-1", PendingReason: reason}}
	if milli > 0 {
		w.Status.QuotaCharge = []*meridianv1.ClassCharge{{AcceleratorClass: class, MilliGpus: milli}}
	}
	b, _ := proto.Marshal(w)
	return &clientv3.Event{Type: clientv3.EventTypePut, Kv: &mvccpb.KeyValue{Key: []byte(WorkloadPrefix + id), Value: b, ModRevision: rev}}
}

func del(rev int64, id string) *clientv3.Event {
	return &clientv3.Event{Type: clientv3.EventTypeDelete, Kv: &mvccpb.KeyValue{Key: []byte(WorkloadPrefix + id), ModRevision: rev}}
}

const (
	queued     = meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED
	dispatched = meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED
	running    = meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING
	succeeded  = meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED
)

// The history replays usage revision by revision: a queue (or a parent)
// over its cap at any revision is a violation, even when a later event of
// the same response brings it back; a release and an admission in one
// revision are not.
func TestHistoryQuotaReplay(t *testing.T) {
	h := NewHistory(Caps{"t/a": {class: 2000}, "t": {class: 3000}})
	now := time.Now()
	h.apply([]*clientv3.Event{
		put(10, "w1", "t/a", queued, "", 0, 0, "waiting"),
		put(10, "w2", "t/a", queued, "", 0, 0, "waiting"),
		put(10, "w3", "t/b", queued, "", 0, 0, "waiting"),
		put(11, "w1", "t/a", dispatched, "d1", 1, 1000, ""),
		put(12, "w2", "t/a", dispatched, "d2", 1, 1000, ""),
		// One revision: w1 ends and w3 starts; t stays at 3000.
		put(13, "w1", "t/a", succeeded, "d1", 1, 1000, ""),
		put(13, "w3", "t/b", dispatched, "d3", 1, 2000, ""),
	}, now)
	if r := h.Report(); r.QuotaViolations != 0 {
		t.Fatalf("violations %v, want none", r.Violations)
	}
	h.apply([]*clientv3.Event{
		put(14, "w4", "t/a", queued, "", 0, 0, "waiting"),
		put(15, "w4", "t/a", dispatched, "d4", 1, 1500, ""), // t/a 2500 > 2000, t 4500 > 3000
		put(16, "w4", "t/a", succeeded, "d4", 1, 1500, ""),
	}, now)
	r := h.Report()
	if r.QuotaViolations != 2 || r.Violations[0].Revision != 15 {
		t.Fatalf("violations %+v, want t/a and t at revision 15", r.Violations)
	}
	if h.InFlight() != 2 { // w2 and w3
		t.Fatalf("in flight %d, want 2", h.InFlight())
	}
	h.apply([]*clientv3.Event{del(17, "w1"), del(17, "w4")}, now)
	if w := h.Report().Workloads["w1"]; !w.Deleted || w.Phase != "SUCCEEDED" {
		t.Fatalf("w1 after its delete: %+v", w)
	}
}

// A dispatch committed with a leader term older than one already seen is
// a deposed leader's write; moves away from a dispatch are classified.
func TestHistoryTermsAndMoves(t *testing.T) {
	h := NewHistory(nil)
	now := time.Now()
	h.apply([]*clientv3.Event{
		put(10, "w1", "t/a", dispatched, "d1", 5, 1000, ""),
		put(11, "w2", "t/a", dispatched, "d2", 7, 1000, ""),
		put(12, "w3", "t/a", dispatched, "d3", 5, 1000, ""), // stale
		put(13, "w1", "t/a", running, "d1", 5, 1000, ""),
		put(14, "w1", "t/a", queued, "", 0, 0, "cluster sim-1 was lost and the workload asks to be requeued on cluster loss"),
		put(15, "w2", "t/a", meridianv1.WorkloadPhase_WORKLOAD_PHASE_PREEMPTED, "d2", 7, 0, ""),
		put(16, "w3", "t/a", succeeded, "d3", 5, 1000, ""),
	}, now)
	r := h.Report()
	if len(r.StaleTerm) != 1 || r.StaleTerm[0].DispatchID != "d3" {
		t.Fatalf("stale %+v, want d3", r.StaleTerm)
	}
	if len(r.Dispatches) != 3 {
		t.Fatalf("%d dispatches, want 3", len(r.Dispatches))
	}
	if r.Moved["d1"].Why != "lost" || r.Moved["d2"].Why != "preempted" {
		t.Fatalf("moves %+v", r.Moved)
	}
	if _, ok := r.Moved["d3"]; ok {
		t.Fatal("a finished dispatch counted as a move")
	}
}

// The launch check finds a dispatch launched twice, a gang placed short,
// a workload running twice at once, and a cancelled run no LOST explains.
func TestCheckLaunches(t *testing.T) {
	t0 := time.Now()
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	h := Report{
		Dispatches: []Dispatch{{DispatchID: "d1"}, {DispatchID: "d2"}, {DispatchID: "d3"}, {DispatchID: "d4"}, {DispatchID: "d5"}, {DispatchID: "d6"}},
		Moved:      map[string]MoveAway{"d5": {Why: "lost", Seen: at(20), Cluster: "sim-2"}},
	}
	ls := []Launch{
		{Cluster: "sim-1", DispatchID: "d1", WorkloadID: "w1", Start: at(0), End: at(2), State: "SUCCEEDED", Replicas: 2, Wanted: 2},
		{Cluster: "sim-3", DispatchID: "d1", WorkloadID: "w1", Start: at(1), End: at(3), State: "SUCCEEDED", Replicas: 2, Wanted: 2},
		{Cluster: "sim-1", DispatchID: "d2", WorkloadID: "w2", Start: at(0), End: at(2), State: "SUCCEEDED", Replicas: 1, Wanted: 3},
		{Cluster: "sim-1", DispatchID: "d3", WorkloadID: "w3", Start: at(0), End: at(9), State: "CANCELLED", Replicas: 1, Wanted: 1},
		{Cluster: "sim-1", DispatchID: "d4", WorkloadID: "w3", Start: at(5), End: at(6), State: "SUCCEEDED", Replicas: 1, Wanted: 1},
		{Cluster: "sim-2", DispatchID: "d5", WorkloadID: "w5", Start: at(10), End: at(40), State: "CANCELLED", Replicas: 1, Wanted: 1},
		{Cluster: "sim-1", DispatchID: "d6", WorkloadID: "w5", Start: at(22), End: at(25), State: "SUCCEEDED", Replicas: 1, Wanted: 1},
		{Cluster: "sim-1", DispatchID: "d6", WorkloadID: "w5", Start: at(23), State: "repeat"},
		{Cluster: "sim-1", DispatchID: "x9", WorkloadID: "w9", Start: at(30), Replicas: 1, Wanted: 1},
	}
	r := CheckLaunches(ls, h, []Window{{Cluster: "sim-2", From: at(15), Till: at(45)}})
	want := LaunchReport{Launches: 8, Repeats: 1, Ended: 7, DoubleLaunches: 1, GangSplits: 1, Overlaps: 1, OverlapsThroughLost: 1,
		Killed: 1, CancelledThroughLost: 1, UnknownDispatches: 1}
	r.Samples = nil
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("got  %+v\nwant %+v", r, want)
	}
}
