package convert

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

func TestWorkloadCarriesMaxRuntime(t *testing.T) {
	for _, tc := range []struct {
		in   *durationpb.Duration
		want time.Duration
	}{{nil, 0}, {durationpb.New(90 * time.Minute), 90 * time.Minute}} {
		w := &meridianv1.Workload{Id: "w", Queue: "q", MaxRuntime: tc.in,
			PodSets: []*meridianv1.PodSet{{Name: "main", Replicas: 1, Resources: &meridianv1.Resources{GpuMilli: 1000}}}}
		sw, err := Workload(w, nil)
		if err != nil {
			t.Fatal(err)
		}
		if sw.MaxRuntime != tc.want {
			t.Fatalf("MaxRuntime = %v, want %v", sw.MaxRuntime, tc.want)
		}
	}
}
