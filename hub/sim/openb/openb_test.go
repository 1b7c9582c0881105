package openb

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

func TestLoadNodesErrors(t *testing.T) {
	tests := map[string]struct {
		csv   string
		field string
	}{
		"ok":             {"sn,cpu_milli,memory_mib,gpu,model\nn1,64000,1024,2,T4\n", ""},
		"missing column": {"sn,cpu_milli,memory_mib,gpu\nn1,1,1,1\n", `"model"`},
		"bad cpu":        {"sn,cpu_milli,memory_mib,gpu,model\nn1,x,1,1,T4\n", "cpu_milli"},
		"negative gpu":   {"sn,cpu_milli,memory_mib,gpu,model\nn1,1,1,-1,T4\n", "gpu"},
		"empty sn":       {"sn,cpu_milli,memory_mib,gpu,model\n,1,1,1,T4\n", "sn"},
		"empty file":     {"", "empty"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			nodes, err := LoadNodes(strings.NewReader(tc.csv), "nodes.csv")
			if tc.field == "" {
				if err != nil || len(nodes) != 1 || nodes[0].GPUs != 2 || nodes[0].Model != "T4" {
					t.Fatalf("LoadNodes = %+v, %v", nodes, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("LoadNodes error = %v, want one naming %s", err, tc.field)
			}
		})
	}
}

func TestLoadPods(t *testing.T) {
	tests := map[string]struct {
		csv   string
		want  Pod
		field string
	}{
		"fraction with spec": {"name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np1,6000,12288,1,460,V100M16|V100M32\n",
			Pod{Name: "p1", Req: gpufit.Request{CPUMilli: 6000, MemMiB: 12288, GPUs: 1, Milli: 460}, Classes: []string{"V100M16", "V100M32"}}, ""},
		"multigpu no spec column": {"name,cpu_milli,memory_mib,num_gpu,gpu_milli\np2,1,2,4,1000\n",
			Pod{Name: "p2", Req: gpufit.Request{CPUMilli: 1, MemMiB: 2, GPUs: 4, Milli: 1000}}, ""},
		"cpu only":           {"name,cpu_milli,memory_mib,num_gpu,gpu_milli\np3,1,2,0,0\n", Pod{Name: "p3", Req: gpufit.Request{CPUMilli: 1, MemMiB: 2}}, ""},
		"fraction of two":    {"name,cpu_milli,memory_mib,num_gpu,gpu_milli\np4,1,2,2,500\n", Pod{}, "gpu_milli"},
		"bad memory":         {"name,cpu_milli,memory_mib,num_gpu,gpu_milli\np5,1,x,0,0\n", Pod{}, "memory_mib"},
		"missing num_gpu":    {"name,cpu_milli,memory_mib,gpu_milli\np6,1,1,0\n", Pod{}, "num_gpu"},
		"milli out of range": {"name,cpu_milli,memory_mib,num_gpu,gpu_milli\np7,1,1,1,1500\n", Pod{}, "gpu_milli"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pods, err := LoadPods(strings.NewReader(tc.csv), "pods.csv")
			if tc.field != "" {
				if err == nil || !strings.Contains(err.Error(), tc.field) {
					t.Fatalf("LoadPods error = %v, want one naming %s", err, tc.field)
				}
				return
			}
			if err != nil || len(pods) != 1 || !reflect.DeepEqual(pods[0], tc.want) {
				t.Fatalf("LoadPods = %+v, %v; want %+v", pods, err, tc.want)
			}
		})
	}
}

func TestCurve(t *testing.T) {
	capMilli := int64(10000)
	// arrived 0.5% rounds to 0 (half to even), 1.5% to 2; 1% has no sample
	// and falls back to its neighbours.
	s := []sample{{0, 0}, {50, 50}, {150, 100}, {1000, 900}, {1000, 1000}}
	c := curve(s, capMilli)
	tests := map[string]struct {
		pct  int
		want float64
	}{
		"zero averages 0 and 0.5":    {0, 0.25},
		"one falls back to 0..2":     {1, (0 + 0.5 + 1) / 3},
		"two":                        {2, 1},
		"ten averages two samples":   {10, 9.5},
		"far from samples is absent": {50, math.NaN()},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := c[tc.pct]
			if math.IsNaN(tc.want) {
				if !math.IsNaN(got) {
					t.Fatalf("curve[%d] = %v, want NaN", tc.pct, got)
				}
				return
			}
			if math.Abs(got-math.Round(tc.want*100)/100) > 1e-9 {
				t.Fatalf("curve[%d] = %v, want %.2f", tc.pct, got, tc.want)
			}
		})
	}
}

func smallCluster() ([]NodeSpec, []Pod) {
	nodes := []NodeSpec{
		{Name: "a", CPUMilli: 32000, MemMiB: 65536, GPUs: 4, Model: "T4"},
		{Name: "b", CPUMilli: 32000, MemMiB: 65536, GPUs: 4, Model: "T4"},
		{Name: "c", CPUMilli: 64000, MemMiB: 65536, GPUs: 8, Model: "G2"},
	}
	var pods []Pod
	add := func(n int, prefix string, r gpufit.Request, classes ...string) {
		for i := 0; i < n; i++ {
			pods = append(pods, Pod{Name: prefix + string(rune('a'+i)), Req: r, Classes: classes})
		}
	}
	add(6, "frac", gpufit.Request{CPUMilli: 2000, MemMiB: 1024, GPUs: 1, Milli: 500})
	add(4, "one", gpufit.Request{CPUMilli: 4000, MemMiB: 1024, GPUs: 1, Milli: 1000})
	add(2, "two", gpufit.Request{CPUMilli: 4000, MemMiB: 1024, GPUs: 2, Milli: 1000}, "G2")
	add(2, "cpu", gpufit.Request{CPUMilli: 1000, MemMiB: 1024})
	return nodes, pods
}

func TestArrivalsTune(t *testing.T) {
	nodes, pods := smallCluster()
	tests := map[string]struct {
		tune float64
		cmp  func(total, capacity int64) bool
	}{
		"keep":      {0, func(total, _ int64) bool { return total == 11000 }},
		"tune down": {0.5, func(total, c int64) bool { return total <= c/2 }},
		"tune up":   {3, func(total, c int64) bool { return total <= 3*c && total > 3*c-2000 }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, _ := Arrivals(nodes, pods, 42, tc.tune)
			var total int64
			for _, p := range got {
				total += p.Req.TotalMilli()
			}
			if !tc.cmp(total, 16000) {
				t.Fatalf("total GPU request after tune %v = %d (of capacity 16000)", tc.tune, total)
			}
			again, _ := Arrivals(nodes, pods, 42, tc.tune)
			if !reflect.DeepEqual(got, again) {
				t.Fatal("Arrivals is not deterministic for a seed")
			}
		})
	}
	a, _ := Arrivals(nodes, pods, 42, 0)
	b, _ := Arrivals(nodes, pods, 43, 0)
	if reflect.DeepEqual(a, b) {
		t.Fatal("seeds 42 and 43 produced the same order")
	}
}

func TestReplaySmallCluster(t *testing.T) {
	nodes, pods := smallCluster()
	for _, pol := range Policies() {
		for _, clusters := range []int{1, 2} {
			t.Run(pol+"/clusters="+string(rune('0'+clusters)), func(t *testing.T) {
				res, err := Replay(context.Background(), nodes, pods, Config{Policy: pol, Seed: 7, Clusters: clusters})
				if err != nil {
					t.Fatal(err)
				}
				checkInvariants(t, res, nodes)
				if res.Placed+res.Failed != len(pods) {
					t.Fatalf("placed %d + failed %d != %d pods", res.Placed, res.Failed, len(pods))
				}
				// Everything fits in this cluster (11 of 16 GPUs requested).
				if res.Failed != 0 {
					t.Fatalf("%d pods failed in a cluster that can hold them all", res.Failed)
				}
				// The 2-GPU pods must land on the G2 node.
				var g2Used int32
				for i, n := range res.Nodes {
					if res.NodeNames[i] == "c" {
						for _, g := range n.GPUs {
							g2Used += gpufit.MilliPerGPU - g.FreeMilli
						}
					}
				}
				if g2Used < 4000 {
					t.Fatalf("G2 node has %d milli used, want >= 4000 (two 2-GPU pods are pinned to it)", g2Used)
				}
			})
		}
	}
}

func TestReplayRejectsBadConfig(t *testing.T) {
	nodes, pods := smallCluster()
	if _, err := Replay(context.Background(), nodes, pods, Config{Policy: "nope"}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("unknown policy: err = %v", err)
	}
	if _, err := Replay(context.Background(), nil, pods, Config{Policy: PolicyFGD}); err == nil {
		t.Fatal("empty node list accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Replay(ctx, nodes, pods, Config{Policy: PolicyFGD}); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled context: err = %v", err)
	}
}

// checkInvariants verifies that no node is over-committed and that the
// reported allocation matches the node states.
func checkInvariants(t *testing.T, res *Result, specs []NodeSpec) {
	t.Helper()
	byName := map[string]NodeSpec{}
	for _, s := range specs {
		byName[s.Name] = s
	}
	var used int64
	for i, n := range res.Nodes {
		s := byName[res.NodeNames[i]]
		if n.CPUMilliFree < 0 || n.CPUMilliFree > s.CPUMilli || n.MemMiBFree < 0 || n.MemMiBFree > s.MemMiB {
			t.Fatalf("node %s CPU/memory out of range: %+v", s.Name, n)
		}
		for _, g := range n.GPUs {
			if g.FreeMilli < 0 || g.FreeMilli > gpufit.MilliPerGPU {
				t.Fatalf("node %s GPU out of range: %+v", s.Name, g)
			}
			used += int64(gpufit.MilliPerGPU - g.FreeMilli)
		}
	}
	if used != res.UsedMilli || used > res.CapacityMilli {
		t.Fatalf("used %d (nodes) vs %d (reported), capacity %d", used, res.UsedMilli, res.CapacityMilli)
	}
}

// traceDir returns the trace folder, skipping the test when the shared data
// is absent (failing instead when MERIDIAN_REQUIRE_DATA=1).
func traceDir(t *testing.T) string {
	t.Helper()
	dir, err := DataDir()
	if err != nil {
		if os.Getenv("MERIDIAN_REQUIRE_DATA") == "1" {
			t.Fatalf("MERIDIAN_REQUIRE_DATA=1 but the OpenB trace is missing: %v", err)
		}
		t.Skipf("skipping: OpenB trace data not available (%v); set MERIDIAN_DATA_DIR", err)
	}
	return filepath.Join(dir, TraceSubdir)
}

// loadTrace reads the trace's node list and one pod list, skipping like
// traceDir.
func loadTrace(t *testing.T, list string) ([]NodeSpec, []Pod) {
	t.Helper()
	dir := traceDir(t)
	nodes, err := LoadNodesFile(filepath.Join(dir, NodesFile))
	if err != nil {
		t.Fatal(err)
	}
	pods, err := LoadPodsFile(filepath.Join(dir, "openb_pod_list_"+list+".csv"))
	if err != nil {
		t.Fatal(err)
	}
	return nodes, pods
}

// TestReplayTraceSlice replays the first 4,500 arrivals of seed 42 on the real
// trace (about 55% arrived load). Up to half load the cluster is nowhere near
// full, so a sound packer places (almost) everything: allocation at 50%
// arrived load must be >= 49%. Allocation never exceeds capacity, and the
// replay is deterministic for a seed.
func TestReplayTraceSlice(t *testing.T) {
	nodes, pods := loadTrace(t, "default")
	if len(nodes) != 1213 || len(pods) != 8152 {
		t.Fatalf("trace has %d nodes and %d pods, want 1213 and 8152", len(nodes), len(pods))
	}
	for _, pol := range []string{PolicyBestFit, PolicyFGD, PolicyMeridian} {
		t.Run(pol, func(t *testing.T) {
			cfg := Config{Policy: pol, Seed: 42, Tune: DefaultTune, MaxPods: 4500}
			res, err := Replay(context.Background(), nodes, pods, cfg)
			if err != nil {
				t.Fatal(err)
			}
			checkInvariants(t, res, nodes)
			if a := res.AllocAt(50); !(a >= 49) {
				t.Fatalf("%s: allocation at 50%% arrived load = %.2f, want >= 49", pol, a)
			}
			again, err := Replay(context.Background(), nodes, pods, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(res.Curve[:56], again.Curve[:56]) || !reflect.DeepEqual(res.Nodes, again.Nodes) {
				t.Fatalf("%s: two replays of seed 42 differ", pol)
			}
		})
	}
}

// With every refinement off and FGD's typical target, Meridian must place
// exactly like FGD: the refinements are the only differences.
func TestMeridianAblationReducesToFGD(t *testing.T) {
	nodes, pods := loadTrace(t, "gpuspec10")
	base := Config{Seed: 43, Tune: DefaultTune, MaxPods: 2000}
	fgd := base
	fgd.Policy = PolicyFGD
	mer := base
	mer.Policy, mer.MeridianOptions = PolicyMeridian, &gpufit.MeridianOptions{}
	a, err := Replay(context.Background(), nodes, pods, fgd)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Replay(context.Background(), nodes, pods, mer)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a.Placement, b.Placement) || !reflect.DeepEqual(a.Nodes, b.Nodes) {
		t.Fatal("Meridian with no refinements and FGD's target placed pods differently from FGD")
	}
	full := base
	full.Policy = PolicyMeridian
	c, err := Replay(context.Background(), nodes, pods, full)
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(a.Placement, c.Placement) {
		t.Fatal("default Meridian placed exactly like FGD; the refinements had no effect")
	}
}
