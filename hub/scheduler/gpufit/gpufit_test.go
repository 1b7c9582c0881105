package gpufit

import (
	"strings"
	"testing"
)

// nodeB is a fluent builder for test nodes.
type nodeB struct{ n Node }

func mkNode(class string, cpu, mem int64) *nodeB {
	return &nodeB{Node{Class: class, CPUMilliFree: cpu, MemMiBFree: mem}}
}

// gpu adds a GPU with the given free share and no memory accounting.
func (b *nodeB) gpu(free ...int32) *nodeB {
	for _, f := range free {
		b.n.GPUs = append(b.n.GPUs, GPU{FreeMilli: f})
	}
	return b
}

// gpuMem adds a GPU with memory accounting.
func (b *nodeB) gpuMem(free, freeMem, totalMem int32) *nodeB {
	b.n.GPUs = append(b.n.GPUs, GPU{FreeMilli: free, FreeMemMiB: freeMem, TotalMemMiB: totalMem})
	return b
}

func (b *nodeB) obj() *Node { return &b.n }

func TestFits(t *testing.T) {
	tests := map[string]struct {
		node *Node
		req  Request
		want bool
	}{
		"cpu-only fits":           {mkNode("A", 4000, 1024).obj(), Request{CPUMilli: 4000, MemMiB: 1024}, true},
		"cpu short":               {mkNode("A", 3999, 1024).obj(), Request{CPUMilli: 4000, MemMiB: 1024}, false},
		"memory short":            {mkNode("A", 4000, 1023).obj(), Request{CPUMilli: 4000, MemMiB: 1024}, false},
		"whole gpu on idle":       {mkNode("A", 8000, 8).gpu(1000).obj(), Request{CPUMilli: 1, GPUs: 1, Milli: 1000}, true},
		"whole gpu on partial":    {mkNode("A", 8000, 8).gpu(999).obj(), Request{GPUs: 1, Milli: 1000}, false},
		"fraction on partial":     {mkNode("A", 8000, 8).gpu(0, 300).obj(), Request{GPUs: 1, Milli: 300}, true},
		"fraction too big":        {mkNode("A", 8000, 8).gpu(299, 299).obj(), Request{GPUs: 1, Milli: 300}, false},
		"two gpus distinct":       {mkNode("A", 8000, 8).gpu(1000, 500, 1000).obj(), Request{GPUs: 2, Milli: 1000}, true},
		"two gpus only one":       {mkNode("A", 8000, 8).gpu(1000, 999).obj(), Request{GPUs: 2, Milli: 1000}, false},
		"eight on eight":          {mkNode("A", 8000, 8).gpu(1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000).obj(), Request{GPUs: 8, Milli: 1000}, true},
		"gpu on cpu node":         {mkNode("", 8000, 8).obj(), Request{GPUs: 1, Milli: 100}, false},
		"gpu ok cpu short":        {mkNode("A", 10, 8).gpu(1000).obj(), Request{CPUMilli: 11, GPUs: 1, Milli: 100}, false},
		"gpu memory fits":         {mkNode("A", 8000, 8).gpuMem(500, 4096, 16384).obj(), Request{GPUs: 1, Milli: 100, GPUMemMiB: 4096}, true},
		"gpu memory short":        {mkNode("A", 8000, 8).gpuMem(500, 4095, 16384).obj(), Request{GPUs: 1, Milli: 100, GPUMemMiB: 4096}, false},
		"memory-only share fits":  {mkNode("A", 8000, 8).gpuMem(1, 8000, 16384).obj(), Request{GPUs: 1, Milli: 1, GPUMemMiB: 8000}, true},
		"memory on another gpu":   {mkNode("A", 8000, 8).gpuMem(1000, 100, 16384).gpuMem(100, 9000, 16384).obj(), Request{GPUs: 1, Milli: 500, GPUMemMiB: 8000}, false},
		"multi gpu memory one ok": {mkNode("A", 8000, 8).gpuMem(1000, 9000, 16384).gpuMem(1000, 10, 16384).obj(), Request{GPUs: 2, Milli: 1000, GPUMemMiB: 8000}, false},
		"zero request":            {mkNode("A", 0, 0).obj(), Request{}, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Fits(tc.node, &tc.req); got != tc.want {
				t.Fatalf("Fits = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRequestValidate(t *testing.T) {
	tests := map[string]struct {
		req   Request
		field string // "" = valid
	}{
		"cpu only":            {Request{CPUMilli: 100, MemMiB: 10}, ""},
		"fraction":            {Request{GPUs: 1, Milli: 250}, ""},
		"eight whole":         {Request{GPUs: 8, Milli: 1000}, ""},
		"negative cpu":        {Request{CPUMilli: -1}, "cpu_milli"},
		"negative memory":     {Request{MemMiB: -1}, "memory_mib"},
		"negative gpus":       {Request{GPUs: -1}, "gpus"},
		"milli without gpus":  {Request{Milli: 10}, "gpu_milli"},
		"gpu mem without gpu": {Request{GPUMemMiB: 10}, "gpu_mem_mib"},
		"zero milli":          {Request{GPUs: 1}, "gpu_milli"},
		"milli over 1000":     {Request{GPUs: 1, Milli: 1001}, "gpu_milli"},
		"fraction of two":     {Request{GPUs: 2, Milli: 500}, "gpu_milli"},
		"negative gpu mem":    {Request{GPUs: 1, Milli: 5, GPUMemMiB: -3}, "gpu_mem_mib"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.req.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil || !IsInvalidRequest(err) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("Validate = %v, want an invalid-request error naming %q", err, tc.field)
			}
		})
	}
}

func TestApplyUndoRoundTrip(t *testing.T) {
	n := mkNode("A", 16000, 65536).gpuMem(1000, 16000, 16000).gpuMem(400, 6000, 16000).gpuMem(1000, 16000, 16000).obj()
	orig := n.Clone()
	r := Request{CPUMilli: 4000, MemMiB: 1000, GPUs: 2, Milli: 1000, GPUMemMiB: 1000}
	gpus := []int{0, 2}
	n.Apply(&r, gpus)
	if n.CPUMilliFree != 12000 || n.MemMiBFree != 64536 || n.GPUs[0].FreeMilli != 0 || n.GPUs[2].FreeMemMiB != 15000 || n.GPUs[1].FreeMilli != 400 {
		t.Fatalf("after Apply: %+v", n)
	}
	n.Undo(&r, gpus)
	if !nodesEqual(n, &orig) {
		t.Fatalf("Undo(Apply) = %+v, want %+v", n, orig)
	}
}

func TestApplyPanicsOnProgrammerError(t *testing.T) {
	tests := map[string]struct {
		req  Request
		gpus []int
		undo bool
	}{
		"wrong count":   {Request{GPUs: 2, Milli: 1000}, []int{0}, false},
		"out of range":  {Request{GPUs: 1, Milli: 100}, []int{7}, false},
		"repeated":      {Request{GPUs: 2, Milli: 1000}, []int{0, 0}, false},
		"overcommit":    {Request{GPUs: 1, Milli: 600}, []int{1}, false},
		"cpu overdraw":  {Request{CPUMilli: 1 << 40}, nil, false},
		"undo overflow": {Request{GPUs: 1, Milli: 100}, []int{0}, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			n := mkNode("A", 8000, 8).gpu(1000, 500).obj()
			orig := n.Clone()
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
				if !nodesEqual(n, &orig) {
					t.Fatalf("node changed by a panicking call: %+v", n)
				}
			}()
			if tc.undo {
				n.Undo(&tc.req, tc.gpus)
			} else {
				n.Apply(&tc.req, tc.gpus)
			}
		})
	}
}

func nodesEqual(a, b *Node) bool {
	if a.Class != b.Class || a.CPUMilliFree != b.CPUMilliFree || a.MemMiBFree != b.MemMiBFree || len(a.GPUs) != len(b.GPUs) {
		return false
	}
	for i := range a.GPUs {
		if a.GPUs[i] != b.GPUs[i] {
			return false
		}
	}
	return true
}

func TestBestFitGPUChoice(t *testing.T) {
	tests := map[string]struct {
		node *Node
		req  Request
		want []int
	}{
		"tightest partial gpu":     {mkNode("A", 8000, 8).gpu(1000, 600, 300, 500).obj(), Request{GPUs: 1, Milli: 300}, []int{2}},
		"skips too small":          {mkNode("A", 8000, 8).gpu(200, 1000, 400).obj(), Request{GPUs: 1, Milli: 300}, []int{2}},
		"tie takes lowest index":   {mkNode("A", 8000, 8).gpu(1000, 500, 500).obj(), Request{GPUs: 1, Milli: 300}, []int{1}},
		"whole gpus lowest index":  {mkNode("A", 8000, 8).gpu(500, 1000, 1000, 1000).obj(), Request{GPUs: 2, Milli: 1000}, []int{1, 2}},
		"cpu-only picks no gpu":    {mkNode("A", 8000, 8).gpu(1000).obj(), Request{CPUMilli: 100}, []int{}},
		"idle gpu when no partial": {mkNode("A", 8000, 8).gpu(0, 1000).obj(), Request{GPUs: 1, Milli: 100}, []int{1}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, got := BestFit().Score(tc.node, &tc.req, nil)
			if !intsEqual(got, tc.want) {
				t.Fatalf("gpus = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestBestFitNodeScore(t *testing.T) {
	r := Request{CPUMilli: 4000, GPUs: 1, Milli: 500}
	tight := mkNode("A", 8000, 8).gpu(500).obj()         // leftover: 4000 cpu, 0 gpu
	loose := mkNode("A", 64000, 8).gpu(1000, 1000).obj() // leftover: 60000 cpu, 1500 gpu
	st, _ := BestFit().Score(tight, &r, nil)
	sl, _ := BestFit().Score(loose, &r, nil)
	// 100*(1 - 0.5*4000/128000) = 98.4375 -> 98
	if st != 98 {
		t.Fatalf("tight score = %v, want 98", st)
	}
	// 100*(1 - 0.5*60000/128000 - 0.5*1500/8000) = 67.1875 -> 67
	if sl != 67 {
		t.Fatalf("loose score = %v, want 67", sl)
	}
}

func TestMinMaxNormalize(t *testing.T) {
	tests := map[string]struct{ in, want []float64 }{
		"spread":    {[]float64{50, 60, 70}, []float64{0, 50, 100}},
		"all equal": {[]float64{42, 42}, []float64{0, 0}},
		"truncates": {[]float64{0, 1, 3}, []float64{0, 33, 100}},
		"empty":     {nil, nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := append([]float64(nil), tc.in...)
			BestFit().(Normalizer).Normalize(s)
			for i := range s {
				if s[i] != tc.want[i] {
					t.Fatalf("Normalize(%v) = %v, want %v", tc.in, s, tc.want)
				}
			}
		})
	}
}

func intsEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
