package load

import (
	"testing"

	"google.golang.org/protobuf/proto"
)

// The i-th workload of a seed is always the same, and the mix holds every
// kind with the shares asked for.
func TestMixIsSeededAndMixed(t *testing.T) {
	m := Mix{Seed: 7, Queues: []QueueShare{{"soak/a", 0.5}, {"soak/b", 0.3}, {"soak/c", 0.2}}}
	kinds, queues := map[string]int{}, map[string]int{}
	const n = 4000
	for i := range n {
		s := m.Workload(i)
		if again := m.Workload(i); !proto.Equal(s.Workload, again.Workload) {
			t.Fatalf("workload %d differs between two draws", i)
		}
		kinds[s.Kind]++
		queues[s.Workload.GetQueue()]++
		if s.Workload.GetIdempotencyKey() == "" || s.Workload.GetLabels()["meridian.io/sim-duration"] == "" {
			t.Fatalf("workload %d lacks its idempotency key or duration: %v", i, s.Workload)
		}
		if s.Kind == KindPreemptor && (s.Workload.GetPreemptible() || s.Workload.GetPriority() <= 50) {
			t.Fatalf("preemptor %d: preemptible %v priority %d", i, s.Workload.GetPreemptible(), s.Workload.GetPriority())
		}
	}
	for _, k := range []string{KindFraction, KindWhole, KindGang, KindPreemptor} {
		if kinds[k] == 0 {
			t.Errorf("no %s in %d workloads: %v", k, n, kinds)
		}
	}
	if a := float64(queues["soak/a"]) / n; a < 0.45 || a > 0.55 {
		t.Errorf("soak/a got %.2f of the load, want about 0.5", a)
	}
	if other := (Mix{Seed: 8, Queues: m.Queues}).Workload(0); proto.Equal(other.Workload, m.Workload(0).Workload) {
		t.Error("two seeds gave the same first workload")
	}
}
