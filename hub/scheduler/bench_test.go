package scheduler

import (
	"fmt"
	"math"
	"math/rand"
	"os"
	"runtime"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/hub/quota"
	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

var benchClasses = []string{"nvidia-h100-80gb", "nvidia-a100-80gb", "nvidia-l4"}

// benchSnapshot builds a federation of clusters x nodes x 8 GPUs (NVLink
// domains of 8 nodes, racks of 32) and pending workloads drawn from a fixed
// mix: 55% whole single-node jobs of 1-8 GPUs, 25% fractional, 15% gangs of
// 2-4 x 8 GPUs (half of them NVLink-bound), 5% CPU-only. 100 leaf queues.
func benchSnapshot(clusters, nodes, pending int, seed int64) *Snapshot {
	rng := rand.New(rand.NewSource(seed))
	s := &Snapshot{Now: t0}
	for c := 0; c < clusters; c++ {
		cl := Cluster{ID: fmt.Sprintf("cluster-%03d", c), LastSeen: t0, Modes: FracModes(FracMPS | FracTimeSlice)}
		class := benchClasses[c%len(benchClasses)]
		cl.Nodes = make([]Node, nodes)
		gpus := make([]gpufit.GPU, nodes*8)
		for i := range gpus {
			gpus[i] = gpufit.GPU{FreeMilli: 1000, FreeMemMiB: 81920, TotalMemMiB: 81920}
		}
		for n := 0; n < nodes; n++ {
			cl.Nodes[n] = Node{
				Name:   fmt.Sprintf("c%03d-n%05d", c, n),
				NVLink: fmt.Sprintf("nvl-%d", n/8),
				Rack:   fmt.Sprintf("rack-%d", n/32),
				Res:    gpufit.Node{Class: class, CPUMilliFree: 192000, MemMiBFree: 2 << 20, GPUs: gpus[n*8 : n*8+8 : n*8+8]},
			}
		}
		s.Clusters = append(s.Clusters, cl)
	}
	specs := []quota.QueueSpec{{Path: "org", Weight: 1}}
	for t := 0; t < 10; t++ {
		specs = append(specs, quota.QueueSpec{Path: fmt.Sprintf("org/team%d", t), Weight: float64(1 + t%4)})
		for p := 0; p < 10; p++ {
			lim := map[string]quota.Limits{}
			for _, c := range benchClasses {
				lim[c] = quota.Limits{Nominal: int64(clusters*nodes) * 8 * 1000 / 100, BorrowLimit: -1, LendLimit: -1}
			}
			specs = append(specs, quota.QueueSpec{Path: fmt.Sprintf("org/team%d/proj%d", t, p), Weight: 1, Limits: lim})
		}
	}
	tree, err := quota.NewTree(specs)
	if err != nil {
		panic(err)
	}
	s.Queues = tree
	s.Pending = make([]*Workload, pending)
	for i := range s.Pending {
		w := &Workload{
			ID:          fmt.Sprintf("wl-%07d", i),
			Queue:       fmt.Sprintf("org/team%d/proj%d", rng.Intn(10), rng.Intn(10)),
			Priority:    int32(rng.Intn(3)),
			Preemptible: true,
			CreatedAt:   t0.Add(time.Duration(i) * time.Millisecond),
		}
		class := benchClasses[rng.Intn(len(benchClasses))]
		ps := PodSet{Name: "main", Replicas: 1, Class: class, Req: gpufit.Request{CPUMilli: 4000, MemMiB: 16384}}
		switch x := rng.Intn(100); {
		case x < 55:
			ps.Req.GPUs, ps.Req.Milli = int32(1+rng.Intn(8)), 1000
		case x < 80:
			ps.Req.GPUs, ps.Req.Milli = 1, int32(100*(1+rng.Intn(9)))
		case x < 95:
			ps.Replicas = int32(2 + rng.Intn(3))
			ps.Req.GPUs, ps.Req.Milli = 8, 1000
			if rng.Intn(2) == 0 {
				ps.Topology = TopologyNVLink
			}
		default:
			ps.Class = ""
		}
		w.PodSets = []PodSet{ps}
		s.Pending[i] = w
	}
	return s
}

// BenchmarkPlan measures one scheduling cycle. decisions/s counts workloads
// decided (dispatched or given a pending reason); placements/s counts
// replicas placed. The 100x1000x8 / 100,000 case is the target
// (>= 50,000 decisions/s, heap < 2 GiB); the others show how plan time grows
// with the pending count and the node count.
func BenchmarkPlan(b *testing.B) {
	cases := []struct{ clusters, nodes, pending int }{
		{100, 1000, 100000}, // the target
		{100, 1000, 1000},   // pending scaling: 1x, 10x, 100x
		{100, 1000, 10000},
		{10, 100, 10000}, // node scaling: 1x, 10x, 100x
		{10, 1000, 10000},
		{100, 1000, 10000},
	}
	for _, tc := range cases {
		name := fmt.Sprintf("clusters=%d/nodes=%d/pending=%d", tc.clusters, tc.nodes, tc.pending)
		b.Run(name, func(b *testing.B) {
			s := benchSnapshot(tc.clusters, tc.nodes, tc.pending, 1)
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			cfg := DefaultConfig()
			// As the dispatch loop decides: with a scratch that each
			// cycle reuses (MERIDIAN_BENCH_SCRATCH=off: without).
			if os.Getenv("MERIDIAN_BENCH_SCRATCH") != "off" {
				cfg.Scratch = &Scratch{}
			}
			b.ReportAllocs()
			if k, err := strconv.Atoi(os.Getenv("MERIDIAN_BENCH_NODE_CANDIDATES")); err == nil && k > 0 {
				cfg.NodeCandidates = k
			}
			b.ResetTimer()
			// One cycle per iteration: run with -benchtime 100x (make bench
			// does) so the percentiles rest on at least 100 cycles.
			var p *Plan
			cycles := make([]float64, 0, b.N)
			for i := 0; i < b.N; i++ {
				start := time.Now()
				p = Decide(s, cfg)
				cycles = append(cycles, time.Since(start).Seconds())
			}
			b.StopTimer()
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			sort.Float64s(cycles)
			p50 := cyclePct(cycles, 0.5)
			b.ReportMetric(float64(p.Stats.Considered)/p50, "decisions/s")
			b.ReportMetric(float64(p.Stats.Placements)/p50, "placements/s")
			b.ReportMetric(float64(p.Stats.Dispatched), "dispatched")
			b.ReportMetric(p50*1000, "cycle-p50-ms")
			if len(cycles) >= 100 {
				b.ReportMetric(cyclePct(cycles, 0.99)*1000, "cycle-p99-ms")
			} else if b.N > 1 { // not the testing package's one-iteration probe
				b.Logf("%d cycles: too few for a p99 (make bench runs -benchtime 100x)", len(cycles))
			}
			b.ReportMetric(float64(len(cycles)), "cycles")
			b.ReportMetric(float64(after.HeapInuse)/(1<<20), "heap-MiB")
		})
	}
}

// naiveFirstFit is the in-process baseline: FIFO order, every cluster in
// turn, every replica on the first node that fits by a linear scan, no index,
// no memo, no quota. It is what a straightforward dispatcher does.
func naiveFirstFit(s *Snapshot) (decided, placed int) {
	clusters := deepCopyClusters(s.Clusters)
	type step struct {
		n    *Node
		r    *gpufit.Request
		gpus []int
	}
	for _, w := range s.Pending {
		decided++
		for ci := range clusters {
			var log []step
			ok := true
			for pi := range w.PodSets {
				ps := &w.PodSets[pi]
				for k := int32(0); k < ps.Replicas && ok; k++ {
					found := false
					for ni := range clusters[ci].Nodes {
						n := &clusters[ci].Nodes[ni]
						if ps.Class != "" && ps.Req.GPUs > 0 && n.Res.Class != ps.Class {
							continue
						}
						if gpufit.Fits(&n.Res, &ps.Req) {
							_, g := gpufit.BestFit().Score(&n.Res, &ps.Req, nil)
							n.Res.Apply(&ps.Req, g)
							log = append(log, step{n, &ps.Req, g})
							found = true
							break
						}
					}
					ok = found
				}
			}
			if ok {
				placed += len(log)
				break
			}
			for i := len(log) - 1; i >= 0; i-- {
				log[i].n.Res.Undo(log[i].r, log[i].gpus)
			}
		}
	}
	return decided, placed
}

// BenchmarkPlanBaseline runs the naive first-fit baseline on the same
// snapshots as BenchmarkPlan (the sizes it can finish), for comparison.
func BenchmarkPlanBaseline(b *testing.B) {
	for _, tc := range []struct{ clusters, nodes, pending int }{{10, 100, 10000}, {10, 1000, 10000}} {
		b.Run(fmt.Sprintf("clusters=%d/nodes=%d/pending=%d", tc.clusters, tc.nodes, tc.pending), func(b *testing.B) {
			s := benchSnapshot(tc.clusters, tc.nodes, tc.pending, 1)
			b.ResetTimer()
			start := time.Now()
			var d, p int
			for i := 0; i < b.N; i++ {
				d, p = naiveFirstFit(s)
			}
			per := time.Since(start).Seconds() / float64(b.N)
			b.ReportMetric(float64(d)/per, "decisions/s")
			b.ReportMetric(float64(p)/per, "placements/s")
		})
	}
}

// cyclePct is the q-quantile of sorted cycle times by nearest rank.
func cyclePct(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
