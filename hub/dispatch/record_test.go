package dispatch

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/quota"
	"github.com/meridian-gpu/meridian/hub/scheduler"
	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

func TestBackoffFor(t *testing.T) {
	tests := map[string]struct {
		n    int
		want time.Duration
	}{
		"first":        {1, 10 * time.Second},
		"second":       {2, 20 * time.Second},
		"fourth":       {4, 80 * time.Second},
		"capped":       {20, 5 * time.Minute},
		"zero is base": {0, 10 * time.Second},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := backoffFor(tc.n, 10*time.Second, 5*time.Minute); got != tc.want {
				t.Fatalf("backoffFor(%d) = %s, want %s", tc.n, got, tc.want)
			}
		})
	}
}

func TestBackoffConditions(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := &meridianv1.Workload{Id: "w", Status: &meridianv1.WorkloadStatus{}}
	setBackoff(w, "east", 1, "full", now.Add(time.Minute))
	setBackoff(w, "west", 1, "full", now.Add(-time.Second))
	setBackoff(w, "east", 2, "full again", now.Add(2*time.Minute))
	if len(w.Status.Conditions) != 2 {
		t.Fatalf("conditions = %d, want one per cluster", len(w.Status.Conditions))
	}
	if got := avoided(w, now); strings.Join(got, ",") != "east" {
		t.Fatalf("avoided = %v, want east only (west's backoff expired)", got)
	}
	if n := rejections(w, "east"); n != 2 {
		t.Fatalf("rejections(east) = %d, want 2", n)
	}
	if n := rejections(w, "north"); n != 0 {
		t.Fatalf("rejections(north) = %d, want 0", n)
	}
	if got := avoided(w, now.Add(3*time.Minute)); len(got) != 0 {
		t.Fatalf("avoided after expiry = %v", got)
	}
}

func TestChargeClampsAndSkipsUnknown(t *testing.T) {
	c := scheduler.Cluster{ID: "east", Nodes: []scheduler.Node{{Name: "n1", Res: gpufit.Node{CPUMilliFree: 1000, MemMiBFree: 100,
		GPUs: []gpufit.GPU{{FreeMilli: 1000, FreeMemMiB: 100}, {FreeMilli: 300, FreeMemMiB: 100}}}}}}
	w := &scheduler.Workload{PodSets: []scheduler.PodSet{{Name: "p", Req: gpufit.Request{GPUs: 1, Milli: 500, GPUMemMiB: 50, CPUMilli: 600, MemMiB: 10}}}}
	charge(&c, nodeIndex(&c), w, []scheduler.PodSetPlacement{{PodSet: "p", Replicas: []scheduler.ReplicaPlacement{
		{Node: "n1", GPUs: []int{0}}, {Node: "n1", GPUs: []int{1}}, {Node: "ghost", GPUs: []int{0}}, {Node: "n1", GPUs: []int{7}},
	}}})
	n := c.Nodes[0].Res
	if n.GPUs[0].FreeMilli != 500 || n.GPUs[1].FreeMilli != 0 || n.GPUs[0].FreeMemMiB != 50 {
		t.Fatalf("gpus = %+v", n.GPUs)
	}
	if n.CPUMilliFree != 0 || n.MemMiBFree != 70 {
		t.Fatalf("cpu/mem = %d/%d, want clamped 0 and 70", n.CPUMilliFree, n.MemMiBFree)
	}
}

func TestSafeDecideRecoversPanics(t *testing.T) {
	orig := decideFn
	t.Cleanup(func() { decideFn = orig })
	decideFn = func(*scheduler.Snapshot, scheduler.Config) *scheduler.Plan { panic("boom in the core") }
	p, err := safeDecide(&scheduler.Snapshot{}, scheduler.DefaultConfig())
	if p != nil || err == nil || !strings.Contains(err.Error(), "boom in the core") {
		t.Fatalf("safeDecide = %v, %v; want the panic as an error", p, err)
	}
	decideFn = orig
	tree, err := quota.NewTree(nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := safeDecide(&scheduler.Snapshot{Queues: tree}, scheduler.DefaultConfig()); err != nil || p == nil {
		t.Fatalf("plain Decide = %v, %v", p, err)
	}
}

func TestDecodeRecordNamesMissingFields(t *testing.T) {
	tests := map[string]struct {
		in, want string
	}{
		"not json":        {`{`, "dispatch record"},
		"missing cluster": {`{"dispatchId":"d","workloadId":"w"}`, "cluster"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := decodeRecord([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
	r, err := decodeRecord([]byte(`{"dispatchId":"d","workloadId":"w","cluster":"c","acked":true}`))
	if err != nil || !r.Acked || r.Cluster != "c" {
		t.Fatalf("good record = %+v, %v", r, err)
	}
}

// A dispatch is acknowledged when its workload's status has an accept time
// for this dispatch, or when an older hub marked the record.
func TestAcked(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	accepted := &meridianv1.Workload{Status: &meridianv1.WorkloadStatus{DispatchId: "d", AcceptTime: timestamppb.New(at)}}
	cases := map[string]struct {
		r      Record
		w      *meridianv1.Workload
		want   bool
		wantAt time.Time
	}{
		"workload accepted this dispatch": {Record{DispatchID: "d"}, accepted, true, at},
		"workload accepted another one":   {Record{DispatchID: "e"}, accepted, false, time.Time{}},
		"not accepted yet":                {Record{DispatchID: "d"}, &meridianv1.Workload{Status: &meridianv1.WorkloadStatus{DispatchId: "d"}}, false, time.Time{}},
		"an older hub's record":           {Record{DispatchID: "d", Acked: true, AckedAt: at.Add(-time.Minute)}, &meridianv1.Workload{}, true, at.Add(-time.Minute)},
		"no workload, unacknowledged":     {Record{DispatchID: "d"}, nil, false, time.Time{}},
		"no workload, an older hub's ack": {Record{DispatchID: "d", Acked: true, AckedAt: at}, nil, true, at},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			gotAt, ok := ackedAt(&tc.r, tc.w)
			if ok != tc.want || !gotAt.Equal(tc.wantAt) || acked(&tc.r, tc.w) != tc.want {
				t.Fatalf("ackedAt = %v, %v; want %v, %v", gotAt, ok, tc.wantAt, tc.want)
			}
		})
	}
}

// A dispatch kept in the workload reads back as the record it was made
// from, through the workload's encoding.
func TestFoldedRecordRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)
	for name, r := range map[string]*Record{
		"gang with gpus and mig": {DispatchID: "d-1", WorkloadID: "w", Queue: "acme/ml", Cluster: "east", Attempt: 3, CreatedAt: at,
			LeaderTerm: 42, TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
			Placement: []scheduler.PodSetPlacement{
				{PodSet: "workers", Replicas: []scheduler.ReplicaPlacement{{Node: "n1", GPUs: []int{0, 1}}, {Node: "n2", GPUs: []int{7}}}},
				{PodSet: "mig", MIG: "3g.40gb", Replicas: []scheduler.ReplicaPlacement{{Node: "n3", GPUs: []int{2}}}},
				{PodSet: "cpu-only", Replicas: []scheduler.ReplicaPlacement{{Node: "n4"}}},
			},
			Usage: []scheduler.ClassMilli{{Class: "a100", Milli: 3000}, {Class: "h100", Milli: 500}}},
		"no placement, no usage": {DispatchID: "d-2", WorkloadID: "w", Queue: "q", Cluster: "west", Attempt: 1, CreatedAt: at, LeaderTerm: 1},
	} {
		t.Run(name, func(t *testing.T) {
			w := &meridianv1.Workload{Id: r.WorkloadID, Queue: r.Queue, Status: &meridianv1.WorkloadStatus{
				Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED, Cluster: r.Cluster, DispatchId: r.DispatchID,
				Attempts: r.Attempt, DispatchTime: timestamppb.New(at)}}
			foldRecord(w.Status, r)
			b, err := encodeWorkload(w)
			if err != nil {
				t.Fatal(err)
			}
			back, err := decodeWorkload(b)
			if err != nil {
				t.Fatal(err)
			}
			if !folded(back) {
				t.Fatal("folded() = false for a workload that keeps its dispatch")
			}
			got := recordOf(back)
			if !reflect.DeepEqual(got, r) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, r)
			}
			clearFolded(back.Status)
			if folded(back) || len(back.Status.Assignment) != 0 || len(back.Status.QuotaCharge) != 0 || back.Status.DispatchTraceParent != "" {
				t.Fatalf("clearFolded left %v", back.Status)
			}
		})
	}
}
