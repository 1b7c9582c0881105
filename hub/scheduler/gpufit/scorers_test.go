package gpufit

import (
	"testing"
)

// twoShapeTarget is a workload of half 1-GPU whole pods and half 0.5-GPU
// pods, 4 cores each.
func twoShapeTarget() TargetWorkload {
	return NewTargetWorkload([]Shape{
		{CPUMilli: 4000, GPUs: 1, Milli: 1000, Weight: 1},
		{CPUMilli: 4000, GPUs: 1, Milli: 500, Weight: 1},
	})
}

func TestFragmentation(t *testing.T) {
	tw := twoShapeTarget()
	tests := map[string]struct {
		node *Node
		want float64
	}{
		"idle node has none":       {mkNode("A", 8000, 8).gpu(1000, 1000).obj(), 0},
		"used-up node has none":    {mkNode("A", 8000, 8).gpu(0, 0).obj(), 0},
		"half gpu blocks whole":    {mkNode("A", 8000, 8).gpu(500).obj(), 0.5 * 500},
		"sliver blocks both":       {mkNode("A", 8000, 8).gpu(300).obj(), 300},
		"no cpu strands all":       {mkNode("A", 3999, 8).gpu(1000).obj(), 1000},
		"cpu node has no gpu frag": {mkNode("", 8000, 8).obj(), 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Fragmentation(tc.node, tw); got != tc.want {
				t.Fatalf("Fragmentation = %v, want %v", got, tc.want)
			}
		})
	}
	if got := Fragmentation(mkNode("A", 1, 1).gpu(300).obj(), TargetWorkload{}); got != 0 {
		t.Fatalf("empty workload: Fragmentation = %v, want 0", got)
	}
}

func TestFragmentationClassesAndMemory(t *testing.T) {
	tw := NewTargetWorkload([]Shape{
		{CPUMilli: 1000, GPUs: 1, Milli: 1000, Classes: []string{"T4"}, Weight: 1, MemMiB: 100},
		{CPUMilli: 1000, Weight: 1}, // CPU-only: all free share counts
	})
	t4 := mkNode("T4", 8000, 8).gpu(1000).obj()
	g2 := mkNode("G2", 8000, 8).gpu(1000).obj()
	if got := Fragmentation(t4, tw); got != 500 {
		t.Fatalf("T4 node: %v, want 500 (only the CPU-only half counts)", got)
	}
	if got := Fragmentation(g2, tw); got != 1000 {
		t.Fatalf("G2 node: %v, want 1000 (the T4-only shape has no access)", got)
	}
	var buf [4]int32
	if got := tw.fragMem("T4", 8000, 99, freeMilli(t4, buf[:0])); got != 1000 {
		t.Fatalf("memory-aware, short of memory: %v, want 1000", got)
	}
	if got := tw.fragMem("T4", 8000, 100, freeMilli(t4, buf[:0])); got != 500 {
		t.Fatalf("memory-aware, enough memory: %v, want 500", got)
	}
}

func TestTypicalShapes(t *testing.T) {
	shapes := []Shape{
		{CPUMilli: 1, GPUs: 1, Milli: 1000, Weight: 50},
		{CPUMilli: 2, GPUs: 1, Milli: 500, Weight: 30},
		{CPUMilli: 1, GPUs: 1, Milli: 1000, Weight: 10, MemMiB: 100}, // merges with the first
		{CPUMilli: 3, Weight: 6},
		{CPUMilli: 4, GPUs: 8, Milli: 1000, Weight: 4},
	}
	got := TypicalShapes(shapes, 0.95)
	if len(got) != 3 {
		t.Fatalf("TypicalShapes kept %d shapes, want 3 (60+30+6 >= 95%% of 100): %+v", len(got), got)
	}
	if got[0].Weight != 60 || got[0].MemMiB != 100*10/60 || got[1].Milli != 500 || got[2].GPUs != 0 {
		t.Fatalf("TypicalShapes order/merge wrong: %+v", got)
	}
	if all := TypicalShapes(shapes, 1); len(all) != 4 {
		t.Fatalf("popularity 1 kept %d shapes, want 4", len(all))
	}
}

func TestFGDGPUChoice(t *testing.T) {
	tw := twoShapeTarget()
	tests := map[string]struct {
		node *Node
		req  Request
		want []int
	}{
		// Putting 0.5 on the half-free GPU removes its fragment; putting it
		// on the idle GPU creates one.
		"fills partial before idle": {mkNode("A", 8000, 8).gpu(1000, 500).obj(), Request{CPUMilli: 1000, GPUs: 1, Milli: 500}, []int{1}},
		"only idle fits":            {mkNode("A", 8000, 8).gpu(400, 1000).obj(), Request{CPUMilli: 1000, GPUs: 1, Milli: 500}, []int{1}},
		"whole gpus lowest index":   {mkNode("A", 8000, 8).gpu(500, 1000, 1000).obj(), Request{GPUs: 1, Milli: 1000}, []int{1}},
	}
	for name, tc := range tests {
		for _, sc := range []Scorer{FGD(tw), Meridian(tw)} {
			t.Run(sc.Name()+"/"+name, func(t *testing.T) {
				_, got := sc.Score(tc.node, &tc.req, nil)
				if !intsEqual(got, tc.want) {
					t.Fatalf("gpus = %v, want %v", got, tc.want)
				}
			})
		}
	}
}

func TestFGDNodeScores(t *testing.T) {
	tw := twoShapeTarget()
	f := FGD(tw)
	half := Request{CPUMilli: 1000, GPUs: 1, Milli: 500}
	onPartial, _ := f.Score(mkNode("A", 8000, 8).gpu(500).obj(), &half, nil)
	onIdle, _ := f.Score(mkNode("A", 8000, 8).gpu(1000).obj(), &half, nil)
	if !(onPartial > onIdle) {
		t.Fatalf("FGD prefers the idle GPU node (%v) over the half-used one (%v)", onIdle, onPartial)
	}
	// No change in fragmentation scores exactly 50.
	cpu := Request{CPUMilli: 1000}
	if s, _ := f.Score(mkNode("A", 8000, 8).gpu(1000).obj(), &cpu, nil); s != 50 {
		t.Fatalf("neutral placement scores %v, want 50", s)
	}
}

func TestMeridianRefinements(t *testing.T) {
	t.Run("memory-aware avoids stranding a GPU", func(t *testing.T) {
		tw := NewTargetWorkload([]Shape{{CPUMilli: 1000, GPUs: 1, Milli: 1000, MemMiB: 1000, Weight: 1}})
		r := Request{CPUMilli: 1000, MemMiB: 1500}
		// Node a: after the pod, 500 MiB left next to an idle GPU (stranded).
		// Node b: 2500 MiB left, the GPU stays usable.
		a := mkNode("A", 8000, 2000).gpu(1000).obj()
		b := mkNode("A", 8000, 4000).gpu(1000).obj()
		m := MeridianWith(tw, MeridianOptions{MemoryAware: true})
		sa, _ := m.Score(a, &r, nil)
		sb, _ := m.Score(b, &r, nil)
		if !(sb > sa) {
			t.Fatalf("memory-aware Meridian: stranding node %v >= safe node %v", sa, sb)
		}
		plain := MeridianWith(tw, MeridianOptions{})
		pa, _ := plain.Score(a, &r, nil)
		pb, _ := plain.Score(b, &r, nil)
		if pa != pb {
			t.Fatalf("without memory awareness the nodes should tie, got %v and %v", pa, pb)
		}
	})
	t.Run("class pressure keeps scarce models", func(t *testing.T) {
		tw := NewTargetWorkload([]Shape{
			{CPUMilli: 1000, GPUs: 1, Milli: 1000, Weight: 1},
			{CPUMilli: 1000, GPUs: 1, Milli: 1000, Classes: []string{"T4"}, Weight: 1},
		})
		r := Request{CPUMilli: 1000, GPUs: 1, Milli: 1000}
		t4 := mkNode("T4", 8000, 8).gpu(1000, 1000).obj()
		g2 := mkNode("G2", 8000, 8).gpu(1000, 1000).obj()
		m := MeridianWith(tw, MeridianOptions{ClassPressure: 5})
		st, _ := m.Score(t4, &r, nil)
		sg, _ := m.Score(g2, &r, nil)
		if !(sg > st) {
			t.Fatalf("class pressure: T4 node %v >= G2 node %v", st, sg)
		}
	})
	t.Run("cpu-only pods go where GPUs are used up", func(t *testing.T) {
		tw := twoShapeTarget()
		r := Request{CPUMilli: 1000}
		used := mkNode("A", 8000, 8).gpu(0, 0).obj()
		idle := mkNode("A", 8000, 8).gpu(1000, 1000).obj()
		m := MeridianWith(tw, MeridianOptions{SteerCPUOnly: true})
		su, _ := m.Score(used, &r, nil)
		si, _ := m.Score(idle, &r, nil)
		if !(su > si) || int64(su) != int64(si) {
			t.Fatalf("cpu-only steering: used-up node %v, idle node %v; want a tie-break within one level", su, si)
		}
	})
}
