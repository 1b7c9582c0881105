package sim

import "time"

// Contention is the multi-team contention scenario: 3 clusters with
// different GPU models and topologies (one serving fractions), and 4 teams
// with weights 1, 2, 3 and 4 that each offer more work than their share, so
// that only fairshare decides who runs. Each team's nominal quota is its
// weight share of every class, and borrowing is unlimited, so idle quota is
// lent and reclaimed (which preempts). The first quarter is warm-up and is
// not measured.
func Contention(seed int64, hours float64) *Scenario {
	d := time.Duration(hours * float64(time.Hour))
	s := &Scenario{
		Name:           "contention",
		Seed:           seed,
		Duration:       Duration(d),
		Warmup:         Duration(d / 4),
		SchedulePeriod: Duration(30 * time.Second),
		HalfLife:       Duration(2 * time.Hour),
		Clusters: []ClusterSpec{
			{ID: "us-east", NodeGroups: []NodeGroup{{Count: 8, Class: "nvidia-h100-80gb", GPUs: 8, NodesPerNVLink: 4, NodesPerRack: 8}}},
			{ID: "us-west", NodeGroups: []NodeGroup{{Count: 8, Class: "nvidia-a100-80gb", GPUs: 8, NodesPerRack: 4}}},
			{ID: "eu-central", FractionalModes: []string{"mps", "time-slice"}, NodeGroups: []NodeGroup{{Count: 8, Class: "nvidia-l4", GPUs: 8, GPUMemoryMiB: 24576, NodesPerRack: 4}}},
		},
	}
	caps := map[string]float64{"nvidia-h100-80gb": 64, "nvidia-a100-80gb": 64, "nvidia-l4": 64}
	teams := []struct {
		name   string
		weight float64
	}{{"ml/alpha", 1}, {"ml/beta", 2}, {"ml/gamma", 3}, {"ml/delta", 4}}
	s.Queues = append(s.Queues, QueueSpec{Path: "ml", Weight: 1})
	total := 0.0
	for _, t := range teams {
		total += t.weight
	}
	var capacity float64
	for _, c := range caps {
		capacity += c
	}
	const meanGPUHours = 6.2 * 0.74 // mean size of the mix x mean log-uniform run time (10m..2h)
	for _, t := range teams {
		q := QueueSpec{Path: t.name, Weight: t.weight, Quota: map[string]QuotaSpec{}}
		for class, c := range caps {
			q.Quota[class] = QuotaSpec{Nominal: c * t.weight / total}
		}
		s.Queues = append(s.Queues, q)
		// Every team offers 60% of the whole federation: 2.4x oversubscribed.
		s.Generate = append(s.Generate, GeneratorSpec{
			Queue: t.name, JobsPerHour: 0.6 * capacity / meanGPUHours,
			MinRuntime: Duration(10 * time.Minute), MaxRuntime: Duration(2 * time.Hour),
			Sizes: []string{"1", "2", "4", "8", "2x8"},
		})
	}
	return s
}
