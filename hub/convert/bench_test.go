package convert

import (
	"testing"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// BenchmarkWorkload converts a two-pod-set gang as the hub's mirror does
// at each change of a queued or running workload.
func BenchmarkWorkload(b *testing.B) {
	w := &meridianv1.Workload{Id: "wl-1", Queue: "team/a", Priority: 10, PodSets: []*meridianv1.PodSet{
		{Name: "launcher", Replicas: 1, Resources: &meridianv1.Resources{CpuMilli: 2000, MemoryMib: 4096}},
		{Name: "workers", Replicas: 4, Resources: &meridianv1.Resources{GpuMilli: 8000, AcceleratorClass: "h100"}},
	}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Workload(w, nil); err != nil {
			b.Fatal(err)
		}
	}
}
