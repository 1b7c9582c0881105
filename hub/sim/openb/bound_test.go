package openb

import (
	"context"
	"fmt"
	"math/rand"
	"testing"

	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

// bruteForce is the offline optimum by plain enumeration, written apart
// from exactPack: every GPU pod goes nowhere or on any node and any GPU
// index set that Apply accepts.
func bruteForce(nodes []NodeSpec, pods []Pod) int64 {
	state := make([]gpufit.Node, len(nodes))
	for i, n := range nodes {
		g := make([]gpufit.GPU, n.GPUs)
		for k := range g {
			g[k].FreeMilli = gpufit.MilliPerGPU
		}
		state[i] = gpufit.Node{Class: n.Model, CPUMilliFree: n.CPUMilli, MemMiBFree: n.MemMiB, GPUs: g}
	}
	var best int64
	var rec func(k int, used int64)
	rec = func(k int, used int64) {
		if k == len(pods) {
			best = max(best, used)
			return
		}
		rec(k+1, used)
		p := &pods[k]
		r := &p.Req
		if r.GPUs == 0 {
			return
		}
		for i := range state {
			n := &state[i]
			if !classAllowed(p.Classes, n.Class, r) || n.CPUMilliFree < r.CPUMilli || n.MemMiBFree < r.MemMiB {
				continue
			}
			// every subset of GPUs of size r.GPUs with room
			var sub func(start int, pick []int)
			sub = func(start int, pick []int) {
				if len(pick) == int(r.GPUs) {
					g := append([]int(nil), pick...)
					n.Apply(r, g)
					rec(k+1, used+r.TotalMilli())
					n.Undo(r, g)
					return
				}
				for j := start; j < len(n.GPUs); j++ {
					if n.GPUs[j].FreeMilli >= r.Milli {
						sub(j+1, append(pick, j))
					}
				}
			}
			sub(0, nil)
		}
	}
	rec(0, 0)
	return best
}

// smallInstance draws a tiny cluster and pod list where CPU, memory, the
// GPU models and fractional sharing all bind.
func smallInstance(rng *rand.Rand) ([]NodeSpec, []Pod) {
	models := []string{"A", "B"}
	var nodes []NodeSpec
	for i := rng.Intn(3) + 1; i > 0; i-- {
		nodes = append(nodes, NodeSpec{Name: fmt.Sprintf("n%d", len(nodes)), CPUMilli: int64(4+rng.Intn(9)) * 1000,
			MemMiB: int64(8+rng.Intn(17)) * 1024, GPUs: rng.Intn(4) + 1, Model: models[rng.Intn(2)]})
	}
	var pods []Pod
	for i := rng.Intn(7) + 2; i > 0; i-- {
		p := Pod{Name: fmt.Sprintf("p%d", len(pods)), Req: gpufit.Request{CPUMilli: int64(1+rng.Intn(6)) * 1000, MemMiB: int64(1+rng.Intn(8)) * 1024}}
		switch rng.Intn(4) {
		case 0: // CPU-only
		case 1, 2:
			p.Req.GPUs, p.Req.Milli = 1, int32(100*(1+rng.Intn(9)))
		default:
			p.Req.GPUs, p.Req.Milli = int32(1+rng.Intn(3)), 1000
		}
		if p.Req.GPUs > 0 && rng.Intn(3) == 0 {
			p.Classes = []string{models[rng.Intn(2)]}
		}
		pods = append(pods, p)
	}
	return nodes, pods
}

// TestBoundBracketsOptimum: on small random instances, UpperBound >= the
// brute-forced optimum == OfflinePack (exhaustive at this size) >= what
// every replay policy allocates with all pods arrived.
func TestBoundBracketsOptimum(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	tight := 0
	for it := 0; it < 300; it++ {
		nodes, pods := smallInstance(rng)
		opt := bruteForce(nodes, pods)
		ub, pk := boundAndPack(t, nodes, pods)
		if ub < opt {
			t.Fatalf("instance %d: bound %d < optimum %d\nnodes %+v\npods %+v", it, ub, opt, nodes, pods)
		}
		if pk.Milli != opt {
			t.Fatalf("instance %d: packing %d (%s) != optimum %d\nnodes %+v\npods %+v", it, pk.Milli, pk.By, opt, nodes, pods)
		}
		if ub == opt {
			tight++
		}
		for _, pol := range []string{PolicyBestFit, PolicyFGD, PolicyMeridian} {
			res, err := Replay(context.Background(), nodes, pods, Config{Policy: pol, Seed: int64(it)})
			if err != nil {
				t.Fatal(err)
			}
			if res.UsedMilli > pk.Milli {
				t.Fatalf("instance %d: %s allocates %d > offline packing %d", it, pol, res.UsedMilli, pk.Milli)
			}
		}
	}
	t.Logf("bound equals the optimum on %d of 300 instances", tight)
}

// TestPackingFeasibleAndBounded: on mid-sized random instances (too big to
// brute-force), the heuristic packing is a real packing (re-applied node by
// node within capacity), it is at most the bound, and it is at least what
// BestFit reaches online.
func TestPackingFeasibleAndBounded(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	for it := 0; it < 20; it++ {
		var nodes []NodeSpec
		var pods []Pod
		for range 12 {
			n, p := smallInstance(rng)
			for _, x := range n {
				x.Name = fmt.Sprintf("%s-%d", x.Name, len(nodes))
				nodes = append(nodes, x)
			}
			for _, x := range p {
				x.Name = fmt.Sprintf("%s-%d", x.Name, len(pods))
				pods = append(pods, x)
			}
		}
		ub, pk := boundAndPack(t, nodes, pods)
		if pk.Milli > ub {
			t.Fatalf("instance %d: packing %d > bound %d", it, pk.Milli, ub)
		}
		checkPacking(t, nodes, pods, pk)
		res, err := Replay(context.Background(), nodes, pods, Config{Policy: PolicyBestFit, Seed: 42})
		if err != nil {
			t.Fatal(err)
		}
		if res.UsedMilli > pk.Milli {
			t.Errorf("instance %d: bestfit online %d > offline packing %d (%s)", it, res.UsedMilli, pk.Milli, pk.By)
		}
	}
}

// checkPacking re-applies a packing on fresh nodes (sorted by name, as
// Placement indexes them) and checks its allocation.
func checkPacking(t *testing.T, nodes []NodeSpec, pods []Pod, pk *Packing) {
	t.Helper()
	in := newInstance(sortedByName(nodes), pods)
	ps := newPackState(in)
	for k, i := range pk.Placement {
		if i < 0 {
			continue
		}
		n, r, g := &ps.state[i], &pods[k].Req, pk.GPUs[k]
		ok := classAllowed(pods[k].Classes, n.Class, r) && n.CPUMilliFree >= r.CPUMilli && n.MemMiBFree >= r.MemMiB && len(g) == int(r.GPUs)
		for _, x := range g {
			ok = ok && x >= 0 && x < len(n.GPUs) && n.GPUs[x].FreeMilli >= r.Milli
		}
		if !ok {
			t.Fatalf("packing puts pod %d on node %d GPUs %v where it does not fit", k, i, g)
		}
		ps.applyOn(k, i, g)
	}
	if ps.milli != pk.Milli {
		t.Fatalf("packing claims %d milli, re-applied %d", pk.Milli, ps.milli)
	}
}

func sortedByName(nodes []NodeSpec) []NodeSpec {
	s := append([]NodeSpec(nil), nodes...)
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].Name < s[j-1].Name; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s
}

func TestArrivedPrefix(t *testing.T) {
	pods := []Pod{{Req: gpufit.Request{GPUs: 1, Milli: 500}}, {Req: gpufit.Request{GPUs: 1, Milli: 400}},
		{Req: gpufit.Request{CPUMilli: 1}}, {Req: gpufit.Request{GPUs: 1, Milli: 200}}, {Req: gpufit.Request{GPUs: 1, Milli: 1000}}}
	// capacity 1000: cumulative 50%, 90%, 90%, 110%, 210%.
	if got := len(ArrivedPrefix(pods, 1000, 90)); got != 3 {
		t.Fatalf("prefix at 90%% has %d pods, want 3 (the CPU-only pod at the same load included)", got)
	}
	// No sample rounds to 100: curve() falls back to 99..101, so the prefix
	// runs to 101 (still 3 pods).
	if got := len(ArrivedPrefix(pods, 1000, 100)); got != 3 {
		t.Fatalf("prefix at 100%% has %d pods, want 3", got)
	}
	if got := len(ArrivedPrefix(pods, 1000, 110)); got != 4 {
		t.Fatalf("prefix at 110%% has %d pods, want 4", got)
	}
}

// boundAndPack computes both sides of the limit for one instance.
func boundAndPack(t *testing.T, nodes []NodeSpec, pods []Pod) (int64, *Packing) {
	t.Helper()
	ub, err := UpperBound(nodes, pods)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := OfflinePack(nodes, pods)
	if err != nil {
		t.Fatal(err)
	}
	return ub, pk
}

// TestLimitTrace: on the real trace, seed 42 of the default list at 100%
// arrived load, the bound and the offline packing bracket Meridian's
// replay, and the packing is feasible.
func TestLimitTrace(t *testing.T) {
	nodes, pods := loadTrace(t, "default")
	lim, err := ComputeLimit(context.Background(), nodes, pods, LimitConfig{Seed: 42, Tune: DefaultTune})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Replay(context.Background(), nodes, pods, Config{Policy: PolicyMeridian, Seed: 42, Tune: DefaultTune})
	if err != nil {
		t.Fatal(err)
	}
	m := res.AllocAt(100)
	t.Logf("seed 42 default @100%%: arrived %.2f%%, bound %.2f%%, packed %.2f%% (%s), meridian %.2f%%",
		lim.ArrivedPct(), lim.BoundPct(), lim.PackedPct(), lim.PackedBy, m)
	if lim.ArrivedPct() < 99.5 || lim.ArrivedPct() > 100.5 {
		t.Fatalf("prefix arrived %.2f%%, want 100±0.5", lim.ArrivedPct())
	}
	if !(lim.BoundPct() >= lim.PackedPct() && lim.PackedPct() >= m) {
		t.Fatalf("want bound %.2f >= packed %.2f >= meridian %.2f", lim.BoundPct(), lim.PackedPct(), m)
	}
	if lim.BoundPct() >= lim.ArrivedPct()-0.1 {
		t.Errorf("bound %.2f%% is no better than the arrived request %.2f%%", lim.BoundPct(), lim.ArrivedPct())
	}
}
