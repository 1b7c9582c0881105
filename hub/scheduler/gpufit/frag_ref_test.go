package gpufit

import (
	"math"
	"testing"

	"pgregory.net/rapid"
)

// refFrag is a line-by-line transcription of the reference simulator's
// NodeGpuShareFragAmountScore, shape by shape, used to check the grouped
// implementation.
func refFrag(n *Node, shapes []Shape) float64 {
	var total int64
	for _, g := range n.GPUs {
		total += int64(g.FreeMilli)
	}
	var out float64
	for _, s := range shapes {
		if s.Milli == 0 { // CPU-only shape: XL or XR, all free share counts
			out += s.Weight * float64(total)
			continue
		}
		acc := len(s.Classes) == 0
		for _, c := range s.Classes {
			if c == n.Class && n.Class != "" {
				acc = true
			}
		}
		if !acc {
			out += s.Weight * float64(total)
			continue
		}
		need := s.GPUs
		var small int64
		for _, g := range n.GPUs {
			if g.FreeMilli >= s.Milli {
				need--
			} else {
				small += int64(g.FreeMilli)
			}
		}
		if need <= 0 && n.CPUMilliFree >= s.CPUMilli {
			out += s.Weight * float64(small)
		} else {
			out += s.Weight * float64(total)
		}
	}
	return out
}

func TestFragmentationMatchesReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		classes := []string{"A", "B", "C"}
		var shapes []Shape
		for i := rapid.IntRange(1, 12).Draw(t, "nshapes"); i > 0; i-- {
			s := Shape{CPUMilli: int64(rapid.IntRange(0, 16).Draw(t, "cpu")) * 1000, Weight: float64(rapid.IntRange(1, 9).Draw(t, "w"))}
			switch rapid.IntRange(0, 2).Draw(t, "kind") {
			case 1:
				s.GPUs, s.Milli = 1, int32(rapid.IntRange(1, 1000).Draw(t, "milli"))
			case 2:
				s.GPUs, s.Milli = int32(rapid.IntRange(1, 4).Draw(t, "gpus")), 1000
			}
			if s.GPUs > 0 && rapid.Bool().Draw(t, "constrained") {
				s.Classes = []string{classes[rapid.IntRange(0, 2).Draw(t, "cls")]}
			}
			shapes = append(shapes, s)
		}
		tw := NewTargetWorkload(shapes)
		n := Node{Class: classes[rapid.IntRange(0, 2).Draw(t, "ncls")], CPUMilliFree: int64(rapid.IntRange(0, 16).Draw(t, "ncpu")) * 1000}
		for i := rapid.IntRange(0, 8).Draw(t, "ngpus"); i > 0; i-- {
			n.GPUs = append(n.GPUs, GPU{FreeMilli: int32(rapid.IntRange(0, 1000).Draw(t, "free"))})
		}
		got := Fragmentation(&n, tw)
		want := refFrag(&n, tw.Shapes())
		if math.Abs(got-want) > 1e-6*math.Max(1, want) {
			t.Fatalf("Fragmentation = %v, reference = %v (node %+v, shapes %+v)", got, want, n, tw.Shapes())
		}
	})
}
