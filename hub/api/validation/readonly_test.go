package validation

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// Generated clients send output-only timestamps as zero values; they must
// pass validation, and a real time must not.
func TestZeroOutputOnlyTimestampsAreAccepted(t *testing.T) {
	zero := timestamppb.New(time.Time{}) // 0001-01-01T00:00:00Z
	epoch := &timestamppb.Timestamp{}
	for name, ts := range map[string]*timestamppb.Timestamp{"nil": nil, "0001-01-01": zero, "epoch": epoch} {
		if !UnsetTime(ts) {
			t.Errorf("UnsetTime(%s) = false, want true", name)
		}
		q := &meridianv1.Queue{Path: "acme", CreateTime: ts, UpdateTime: ts}
		if err := ValidateQueue(q); err != nil {
			t.Errorf("queue with %s timestamps: %v", name, err)
		}
		w := &meridianv1.Workload{Queue: "acme", CreateTime: ts,
			PodSets: []*meridianv1.PodSet{{Name: "main", Replicas: 1, Resources: &meridianv1.Resources{GpuMilli: 1000}}}}
		if err := ValidateWorkload(w); err != nil {
			t.Errorf("workload with %s create_time: %v", name, err)
		}
	}
	real := timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	if UnsetTime(real) || UnsetTime(&timestamppb.Timestamp{Seconds: -62135596800, Nanos: 1}) {
		t.Error("UnsetTime accepted a real time")
	}
	if err := ValidateQueue(&meridianv1.Queue{Path: "acme", CreateTime: real}); err == nil {
		t.Error("a queue with a real create_time passed validation")
	}
}
