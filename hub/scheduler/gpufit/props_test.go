package gpufit

import (
	"testing"

	"pgregory.net/rapid"
)

func genNode(t *rapid.T) Node {
	n := Node{
		Class:        rapid.SampledFrom([]string{"A", "B", ""}).Draw(t, "class"),
		CPUMilliFree: int64(rapid.IntRange(0, 64).Draw(t, "cpu")) * 1000,
		MemMiBFree:   int64(rapid.IntRange(0, 64).Draw(t, "mem")) * 1024,
	}
	for i := rapid.IntRange(0, 8).Draw(t, "ngpu"); i > 0; i-- {
		total := int32(rapid.SampledFrom([]int{0, 16384, 32768}).Draw(t, "gmem"))
		free := int32(rapid.IntRange(0, 1000).Draw(t, "free"))
		fm := int32(0)
		if total > 0 {
			fm = int32(rapid.IntRange(0, int(total)).Draw(t, "fmem"))
		}
		n.GPUs = append(n.GPUs, GPU{FreeMilli: free, FreeMemMiB: fm, TotalMemMiB: total})
	}
	return n
}

func genRequest(t *rapid.T) Request {
	r := Request{
		CPUMilli: int64(rapid.IntRange(0, 16).Draw(t, "rcpu")) * 1000,
		MemMiB:   int64(rapid.IntRange(0, 16).Draw(t, "rmem")) * 1024,
	}
	switch rapid.IntRange(0, 2).Draw(t, "kind") {
	case 1:
		r.GPUs, r.Milli = 1, int32(rapid.IntRange(1, 1000).Draw(t, "milli"))
	case 2:
		r.GPUs, r.Milli = int32(rapid.IntRange(1, 8).Draw(t, "gpus")), 1000
	}
	if r.GPUs > 0 {
		r.GPUMemMiB = int32(rapid.SampledFrom([]int{0, 0, 2048, 8192}).Draw(t, "rgmem"))
	}
	return r
}

func genTarget(t *rapid.T) TargetWorkload {
	var shapes []Shape
	for i := rapid.IntRange(0, 6).Draw(t, "nshape"); i > 0; i-- {
		r := genRequest(t)
		shapes = append(shapes, Shape{CPUMilli: r.CPUMilli, MemMiB: r.MemMiB, GPUs: r.GPUs, Milli: r.Milli,
			Weight: float64(rapid.IntRange(1, 5).Draw(t, "w")), Classes: rapid.SampledFrom([][]string{nil, {"A"}, {"A", "B"}}).Draw(t, "cls")})
	}
	return NewTargetWorkload(shapes)
}

func allScorers(tw TargetWorkload) []Scorer {
	return []Scorer{BestFit(), FGD(tw), Meridian(tw), MeridianWith(tw, MeridianOptions{})}
}

// A sequence of fitting placements, each on the GPUs a scorer picked, never
// drives a GPU over MilliPerGPU or its memory, nor CPU or memory below zero;
// undoing them in reverse restores the node exactly.
func TestPropApplySequenceStaysWithinCapacity(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := genNode(t)
		orig := n.Clone()
		tw := genTarget(t)
		scorers := allScorers(tw)
		type placed struct {
			r    Request
			gpus []int
		}
		var log []placed
		for i := rapid.IntRange(1, 20).Draw(t, "steps"); i > 0; i-- {
			r := genRequest(t)
			if !Fits(&n, &r) {
				continue
			}
			sc := scorers[rapid.IntRange(0, len(scorers)-1).Draw(t, "scorer")]
			_, g := sc.Score(&n, &r, nil)
			if len(g) != int(r.GPUs) {
				t.Fatalf("%s picked %d GPUs for a %d-GPU request", sc.Name(), len(g), r.GPUs)
			}
			n.Apply(&r, g)
			log = append(log, placed{r, append([]int(nil), g...)})
			if n.CPUMilliFree < 0 || n.MemMiBFree < 0 {
				t.Fatalf("CPU/memory below zero: %+v", n)
			}
			for _, gp := range n.GPUs {
				if gp.FreeMilli < 0 || gp.FreeMilli > MilliPerGPU || gp.FreeMemMiB < 0 || (gp.TotalMemMiB > 0 && gp.FreeMemMiB > gp.TotalMemMiB) {
					t.Fatalf("GPU out of range: %+v", gp)
				}
			}
		}
		for i := len(log) - 1; i >= 0; i-- {
			n.Undo(&log[i].r, log[i].gpus)
		}
		if !nodesEqual(&n, &orig) {
			t.Fatalf("undoing every placement gave %+v, want %+v", n, orig)
		}
	})
}

// Apply then Undo is the identity for any fitting request and the GPUs any
// scorer picks.
func TestPropApplyUndoIdentity(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := genNode(t)
		r := genRequest(t)
		if !Fits(&n, &r) {
			t.Skip("request does not fit")
		}
		orig := n.Clone()
		_, g := BestFit().Score(&n, &r, nil)
		n.Apply(&r, g)
		n.Undo(&r, g)
		if !nodesEqual(&n, &orig) {
			t.Fatalf("Undo(Apply(n)) = %+v, want %+v", n, orig)
		}
	})
}

// Score is deterministic, does not mutate the node, and returns GPU indices
// that are distinct and each able to serve the request.
func TestPropScoreDeterministicAndPure(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := genNode(t)
		r := genRequest(t)
		if !Fits(&n, &r) {
			t.Skip("request does not fit")
		}
		tw := genTarget(t)
		orig := n.Clone()
		for _, sc := range allScorers(tw) {
			s1, g1 := sc.Score(&n, &r, make([]int, 0, 8))
			g1 = append([]int(nil), g1...)
			s2, g2 := sc.Score(&n, &r, []int{7, 7, 7})
			if s1 != s2 || !intsEqual(g1, g2) {
				t.Fatalf("%s not deterministic: (%v,%v) vs (%v,%v)", sc.Name(), s1, g1, s2, g2)
			}
			if !nodesEqual(&n, &orig) {
				t.Fatalf("%s mutated the node", sc.Name())
			}
			seen := map[int]bool{}
			for _, i := range g1 {
				if seen[i] || !gpuFits(&n, i, &r) {
					t.Fatalf("%s picked bad GPU set %v on %+v for %+v", sc.Name(), g1, n, r)
				}
				seen[i] = true
			}
		}
	})
}
