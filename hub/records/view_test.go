package records

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// everyField is a workload with every field of it and of its status set,
// as a dispatched, finished workload has them.
func everyField() *meridianv1.Workload {
	t0 := time.Date(2026, 12, 3, 4, 0, 0, 123, time.UTC)
	ts := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(t0.Add(d)) }
	exit := int32(3)
	return &meridianv1.Workload{
		Id: "wl-1", Name: "train", Queue: "acme/ml/train", Priority: 7, Preemptible: true,
		ClusterSelector: map[string]string{"region": "eu"},
		PodSets:         []*meridianv1.PodSet{{Name: "main", Replicas: 2, MinReplicas: 1, Resources: &meridianv1.Resources{GpuMilli: 1000, CpuMilli: 4000}}},
		Runtime: &meridianv1.RuntimeTemplate{Kind: &meridianv1.RuntimeTemplate_Container{Container: &meridianv1.ContainerTemplate{
			Image: "img:1", Command: []string{"python"}, Args: []string{"train.py"}, Env: map[string]string{"A": "1"}}}},
		RequeueOnClusterLoss: true, Labels: map[string]string{"team": "vision", "tier": "batch"}, IdempotencyKey: "k-1",
		CreateTime: ts(0), SubmittedBy: "alice", MaxRuntime: durationpb.New(time.Hour), TraceParent: "00-0123-4567-01",
		Status: &meridianv1.WorkloadStatus{
			Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_FAILED, Cluster: "east", DispatchId: "d-1", PendingReason: "was waiting",
			Message: "exit 3", ExitCode: &exit, Attempts: 2, StartTime: ts(time.Second), EndTime: ts(time.Minute),
			Conditions:   []*meridianv1.Condition{{Type: "CancelRequested", Status: meridianv1.ConditionStatus_CONDITION_STATUS_TRUE, Reason: "r", Message: "m", LastTransitionTime: ts(2 * time.Second)}},
			DispatchTime: ts(500 * time.Millisecond), UpdateTime: ts(time.Minute), PendingReasonCode: "NoFit",
			Placement:   &meridianv1.PlacementDecision{Rule: "tightest fit", Clusters: []*meridianv1.ClusterScore{{Cluster: "east", Score: 1, Detail: "d", Chosen: true}}},
			AcceptTime:  ts(600 * time.Millisecond),
			Assignment:  []*meridianv1.PodSetAssignment{{PodSet: "main", Replicas: []*meridianv1.ReplicaAssignment{{Node: "n1", Gpus: []int32{0, 1}}}}},
			QuotaCharge: []*meridianv1.ClassCharge{{AcceleratorClass: "h100", MilliGpus: 2000}}, DispatchTerm: 9, DispatchTraceParent: "00-89ab-cdef-01",
		},
	}
}

// Every field of a workload and of its status is either in the basic view
// or left out of it on purpose: a new field fails here until it is put on
// one side.
func TestBasicViewNamesEveryField(t *testing.T) {
	dropped := map[protoreflect.FullName]bool{}
	for _, n := range []string{"preemptible", "cluster_selector", "pod_sets", "runtime", "requeue_on_cluster_loss",
		"idempotency_key", "max_runtime", "trace_parent"} {
		dropped["meridian.v1.Workload."+protoreflect.FullName(n)] = true
	}
	for _, n := range []string{"conditions", "placement", "assignment", "quota_charge", "dispatch_term", "dispatch_trace_parent"} {
		dropped["meridian.v1.WorkloadStatus."+protoreflect.FullName(n)] = true
	}
	full := everyField()
	basic := BasicOf(full)
	for _, m := range []struct {
		full, basic protoreflect.Message
	}{
		{full.ProtoReflect(), basic.ProtoReflect()},
		{full.Status.ProtoReflect(), basic.Status.ProtoReflect()},
	} {
		fields := m.full.Descriptor().Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			if !m.full.Has(fd) {
				t.Errorf("%s is not set in the test's workload: set it", fd.FullName())
				continue
			}
			inBasic := basicWorkloadFields.has(fd.Number()) || fd.FullName() == "meridian.v1.Workload.status"
			if fd.ContainingMessage().FullName() == "meridian.v1.WorkloadStatus" {
				inBasic = basicStatusFields.has(fd.Number())
			}
			switch {
			case inBasic && dropped[fd.FullName()]:
				t.Errorf("%s is both kept and dropped", fd.FullName())
			case !inBasic && !dropped[fd.FullName()]:
				t.Errorf("%s is neither in the basic view nor dropped on purpose: decide", fd.FullName())
			case inBasic && fd.Message() == nil && !m.basic.Get(fd).Equal(m.full.Get(fd)):
				t.Errorf("%s: basic view has %v, workload %v", fd.FullName(), m.basic.Get(fd), m.full.Get(fd))
			case inBasic && !m.basic.Has(fd):
				t.Errorf("%s: missing from the basic view", fd.FullName())
			case !inBasic && m.basic.Has(fd):
				t.Errorf("%s: in the basic view", fd.FullName())
			}
		}
	}
	if BasicOf(nil) != nil {
		t.Error("BasicOf(nil) is not nil")
	}
}

// The view cut from the stored bytes is, byte for byte, the encoding of the
// view made from the decoded workload.
func TestBasicWorkloadIsTheEncodingOfBasicOf(t *testing.T) {
	ws := append(summaryRecords(), everyField(), &meridianv1.Workload{Id: "no-status"}, &meridianv1.Workload{Id: "empty-status", Status: &meridianv1.WorkloadStatus{}})
	for _, w := range ws {
		b, err := marshalDet(w)
		if err != nil {
			t.Fatal(err)
		}
		got, err := BasicWorkload(b)
		if err != nil {
			t.Fatalf("%s: %v", w.GetId(), err)
		}
		want, err := marshalDet(BasicOf(w))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: cut % x\nwant % x", w.GetId(), got, want)
		}
	}
	if b, _ := marshalDet(everyField()); len(b) < 2*len(mustBasic(t, b)) {
		t.Errorf("the basic view of a dispatched workload is %d of its %d bytes; want at most half", len(mustBasic(t, b)), len(b))
	}
	// A known field with another wire type is an unknown field to the
	// decoder (name as a varint, status as a varint): the view leaves it
	// out, as BasicOf drops unknown fields.
	for _, odd := range [][]byte{{0x10, 0x30}, {0x68, 0x01}, {0x6a, 0x02, 0x10, 0x05}} {
		w, err := decodeFull(odd)
		if err != nil {
			t.Fatalf("% x: %v", odd, err)
		}
		got, err := decodeFull(mustBasic(t, odd))
		if err != nil || !proto.Equal(got, BasicOf(w)) {
			t.Errorf("% x: cut decodes to %v (%v), want %v", odd, got, err, BasicOf(w))
		}
	}
	for _, bad := range [][]byte{{0x0a}, {0x0a, 0x05, 'a'}, {0x6a, 0x02, 0x08}, {0xff}} {
		if _, err := BasicWorkload(bad); err == nil {
			t.Errorf("% x: no error", bad)
		}
	}
}

func mustBasic(t *testing.T, b []byte) []byte {
	t.Helper()
	out, err := BasicWorkload(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// FuzzBasicWorkload: whatever the full decode accepts, the cut view
// decodes to BasicOf of it; nothing panics.
func FuzzBasicWorkload(f *testing.F) {
	for _, w := range append(summaryRecords(), everyField()) {
		b, _ := proto.Marshal(w)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cut, cutErr := BasicWorkload(b)
		w, err := decodeFull(b)
		if err != nil {
			return
		}
		if cutErr != nil {
			t.Fatalf("the full decode accepts what the cut refuses: %v", cutErr)
		}
		got, err := decodeFull(cut)
		if err != nil {
			t.Fatalf("the cut does not decode: %v", err)
		}
		if want := BasicOf(w); !proto.Equal(got, want) {
			t.Fatalf("cut decodes to %v, want %v", got, want)
		}
	})
}

func BenchmarkBasicWorkload(b *testing.B) {
	rec, _ := marshalDet(everyField())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := BasicWorkload(rec); err != nil {
			b.Fatal(err)
		}
	}
}
