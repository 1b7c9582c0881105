package load

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/meridian-gpu/meridian/connectors/simcluster"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// Class is the accelerator class every soak workload asks for.
const Class = "nvidia-h100-80gb"

// Kinds of workload in the mix.
const (
	KindFraction  = "fraction"
	KindWhole     = "whole"
	KindGang      = "gang"
	KindPreemptor = "preemptor"
)

// QueueShare is one leaf queue and its share of the submits.
type QueueShare struct {
	Path  string
	Share float64
}

// Mix draws workloads from a seed.
type Mix struct {
	Seed   uint64
	Queues []QueueShare
	// MinDuration and MaxDuration bound each workload's run time
	// (uniform); zero means 0.5 s and 3.5 s.
	MinDuration, MaxDuration time.Duration
}

// Spec is one drawn workload with what the checks need to know of it.
type Spec struct {
	Index    int
	Kind     string
	Workload *meridianv1.Workload
}

// Workload returns the i-th workload of the mix; the same (seed, i) always
// gives the same workload.
func (m Mix) Workload(i int) Spec {
	r := rand.New(rand.NewPCG(m.Seed, uint64(i)))
	minD, maxD := m.MinDuration, m.MaxDuration
	if minD <= 0 {
		minD = 500 * time.Millisecond
	}
	if maxD < minD {
		maxD = minD + 3*time.Second
	}
	dur := minD + time.Duration(r.Int64N(int64(maxD-minD)+1))
	dur = dur.Round(time.Millisecond)
	q := m.Queues[len(m.Queues)-1].Path
	x, acc := r.Float64(), 0.0
	for _, s := range m.Queues {
		acc += s.Share
		if x < acc {
			q = s.Path
			break
		}
	}
	res := func(milli int32) *meridianv1.Resources {
		rs := &meridianv1.Resources{GpuMilli: milli, CpuMilli: 500, MemoryMib: 1024, AcceleratorClass: Class}
		if milli < 1000 {
			rs.FractionalMode = meridianv1.FractionalMode_FRACTIONAL_MODE_ANY
			rs.GpuMemoryMib = 8192
		}
		return rs
	}
	w := &meridianv1.Workload{
		Name: fmt.Sprintf("soak-%d", i), Queue: q, Preemptible: true,
		IdempotencyKey:       fmt.Sprintf("soak-%d-%d", m.Seed, i),
		RequeueOnClusterLoss: r.Float64() < 0.8,
		Labels:               map[string]string{simcluster.LabelDuration: dur.String(), "meridian.io/soak-kind": ""},
	}
	priorities := []int32{0, 10, 50}
	w.Priority = priorities[r.IntN(len(priorities))]
	var kind string
	switch k := r.Float64(); {
	case k < 0.55:
		kind = KindFraction
		fr := []int32{100, 250, 500}
		w.PodSets = []*meridianv1.PodSet{{Name: "main", Replicas: 1, Resources: res(fr[r.IntN(len(fr))])}}
	case k < 0.83:
		kind = KindWhole
		w.PodSets = []*meridianv1.PodSet{{Name: "main", Replicas: 1, Resources: res(1000)}}
	case k < 0.98:
		kind = KindGang
		topo := []meridianv1.Topology{meridianv1.Topology_TOPOLOGY_CLUSTER, meridianv1.Topology_TOPOLOGY_NVLINK_DOMAIN, meridianv1.Topology_TOPOLOGY_RACK}
		w.PodSets = []*meridianv1.PodSet{{Name: "workers", Replicas: int32(2 + r.IntN(3)), Resources: res(1000), Topology: topo[r.IntN(len(topo))]}}
		if r.IntN(4) == 0 {
			w.PodSets = append(w.PodSets, &meridianv1.PodSet{Name: "launcher", Replicas: 1, Resources: res(250)})
		}
	default:
		kind = KindPreemptor
		w.Priority, w.Preemptible = 100, false
		w.PodSets = []*meridianv1.PodSet{{Name: "main", Replicas: int32(1 + r.IntN(2)), Resources: res(1000)}}
	}
	w.Labels["meridian.io/soak-kind"] = kind
	return Spec{Index: i, Kind: kind, Workload: w}
}
