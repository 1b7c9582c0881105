package records

import (
	"testing"
	"time"
	"unsafe"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// fullSummary is what the summary must equal: the same facts read from
// the fully decoded message.
func fullSummary(w *meridianv1.Workload) WorkloadSummary {
	out := WorkloadSummary{ID: w.GetId(), Queue: w.GetQueue(), IdempotencyKey: w.GetIdempotencyKey(), Phase: w.GetStatus().GetPhase(),
		PendingCode: w.GetStatus().GetPendingReasonCode()}
	st := w.GetStatus()
	for _, ts := range []*timestamppb.Timestamp{st.GetEndTime(), st.GetUpdateTime(), w.GetCreateTime()} {
		if ts != nil && ts.IsValid() && (ts.GetSeconds() != 0 || ts.GetNanos() != 0) {
			out.End = ts.AsTime()
			break
		}
	}
	return out
}

func summaryRecords() []*meridianv1.Workload {
	t0 := time.Date(2026, 12, 2, 4, 0, 0, 123, time.UTC)
	return []*meridianv1.Workload{
		{},
		{Id: "w-1", Queue: "acme/ml", CreateTime: timestamppb.New(t0)},
		{Id: "w-q", Queue: "acme/ml", CreateTime: timestamppb.New(t0), Status: &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED,
			PendingReasonCode: "NoFit", PendingReason: "no cluster has 8 free GPUs"}},
		{Id: "w-2", Queue: "acme/ml", IdempotencyKey: "k-2", Name: "train", Labels: map[string]string{"a": "b"},
			PodSets:    []*meridianv1.PodSet{{Name: "main", Replicas: 2, Resources: &meridianv1.Resources{GpuMilli: 1000}}},
			CreateTime: timestamppb.New(t0),
			Status: &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED, Cluster: "east",
				UpdateTime: timestamppb.New(t0.Add(time.Minute)), EndTime: timestamppb.New(t0.Add(2 * time.Minute)),
				Conditions: []*meridianv1.Condition{{Type: "X", LastTransitionTime: timestamppb.New(t0)}}}},
		// No end time: the update time counts, then the creation.
		{Id: "w-3", Status: &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_FAILED, UpdateTime: timestamppb.New(t0)}},
		{Id: "w-4", CreateTime: timestamppb.New(t0), Status: &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED,
			EndTime: &timestamppb.Timestamp{}}},
		// An invalid end time is skipped, as EndTime skips it.
		{Id: "w-5", Status: &meridianv1.WorkloadStatus{EndTime: &timestamppb.Timestamp{Seconds: 1, Nanos: -1}, UpdateTime: timestamppb.New(t0)}},
		{Id: "w-6", Status: &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase(-3)}},
	}
}

func TestSummarizeWorkloadMatchesTheFullDecode(t *testing.T) {
	for _, w := range summaryRecords() {
		b, err := marshalDet(w)
		if err != nil {
			t.Fatal(err)
		}
		got, err := SummarizeWorkload(b)
		if err != nil {
			t.Fatalf("%s: %v", w.GetId(), err)
		}
		if want := fullSummary(w); got != want {
			t.Errorf("%s: summary %+v, want %+v", w.GetId(), got, want)
		}
	}
	// Two occurrences of the status merge as proto.Unmarshal merges them:
	// the later phase wins, the earlier end time stays.
	a, _ := marshalDet(&meridianv1.Workload{Status: &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING, EndTime: timestamppb.New(time.Unix(100, 0))}})
	b, _ := marshalDet(&meridianv1.Workload{Id: "w", Status: &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED}})
	both := append(append([]byte{}, a...), b...)
	full, err := decodeFull(both)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := SummarizeWorkload(both); err != nil || got != fullSummary(full) {
		t.Errorf("merged: %+v, %v; want %+v", got, err, fullSummary(full))
	}
	for _, bad := range [][]byte{{0x0a}, {0x0a, 0x05, 'a'}, {0x6a, 0x02, 0x08}, {0xff}} {
		if _, err := SummarizeWorkload(bad); err == nil {
			t.Errorf("% x: no error", bad)
		}
	}
}

// The field numbers the summary reads are the generated message's.
func TestSummaryFieldNumbers(t *testing.T) {
	check := func(md protoreflect.MessageDescriptor, name protoreflect.Name, num int) {
		t.Helper()
		fd := md.Fields().ByName(name)
		if fd == nil || int(fd.Number()) != num {
			t.Errorf("%s.%s: field %v, summary reads %d", md.FullName(), name, fd, num)
		}
	}
	wd := (&meridianv1.Workload{}).ProtoReflect().Descriptor()
	check(wd, "id", fieldWorkloadID)
	check(wd, "queue", fieldWorkloadQueue)
	check(wd, "idempotency_key", fieldWorkloadIdemKey)
	check(wd, "create_time", fieldWorkloadCreateTime)
	check(wd, "status", fieldWorkloadStatus)
	sd := (&meridianv1.WorkloadStatus{}).ProtoReflect().Descriptor()
	check(sd, "phase", fieldStatusPhase)
	check(sd, "end_time", fieldStatusEndTime)
	check(sd, "update_time", fieldStatusUpdateTime)
	check(sd, "pending_reason_code", fieldStatusPendingCode)
	td := (&timestamppb.Timestamp{}).ProtoReflect().Descriptor()
	check(td, "seconds", fieldTimestampSeconds)
	check(td, "nanos", fieldTimestampNanos)
}

// FuzzSummarizeWorkload: whatever the full decode accepts, the
// summary reads the same; nothing panics.
func FuzzSummarizeWorkload(f *testing.F) {
	for _, w := range summaryRecords() {
		b, _ := proto.Marshal(w)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, sumErr := SummarizeWorkload(b)
		w, err := decodeFull(b)
		if err != nil {
			return
		}
		if sumErr != nil {
			t.Fatalf("the full decode accepts what the summary refuses: %v", sumErr)
		}
		if want := fullSummary(w); got != want {
			t.Fatalf("summary %+v, full decode %+v", got, want)
		}
		if shared, err := SummarizeWorkloadShared(b); err != nil || shared != got {
			t.Fatalf("shared summary %+v (%v), copied %+v", shared, err, got)
		}
	})
}

// The shared summary allocates nothing, and its strings are b's bytes.
func TestSummarizeWorkloadSharedCopiesNothing(t *testing.T) {
	rec, err := marshalDet(summaryRecords()[2])
	if err != nil {
		t.Fatal(err)
	}
	var s WorkloadSummary
	if n := testing.AllocsPerRun(100, func() { s, err = SummarizeWorkloadShared(rec) }); err != nil || n != 0 {
		t.Fatalf("shared summary: %v allocations, err %v", n, err)
	}
	if s.ID == "" || s.Queue == "" {
		t.Fatalf("summary %+v has no id or queue", s)
	}
	within := func(str string) bool {
		p, lo := uintptr(unsafe.Pointer(unsafe.StringData(str))), uintptr(unsafe.Pointer(unsafe.SliceData(rec)))
		return p >= lo && p+uintptr(len(str)) <= lo+uintptr(len(rec))
	}
	if !within(s.ID) || !within(s.Queue) {
		t.Error("the shared summary's strings are copies")
	}
	if n := testing.AllocsPerRun(100, func() { s, err = SummarizeWorkload(rec) }); n == 0 {
		t.Error("the copying summary allocated nothing: its strings share the record")
	}
}

func BenchmarkSummarizeWorkload(b *testing.B) {
	rec, _ := marshalDet(summaryRecords()[2])
	b.Run("summary", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := SummarizeWorkload(rec); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline-full-decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeFull(rec); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func marshalDet(w *meridianv1.Workload) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(w)
}

func decodeFull(b []byte) (*meridianv1.Workload, error) {
	w := &meridianv1.Workload{}
	return w, proto.Unmarshal(b, w)
}
