package kubernetes

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

func freeMilli(n *agentv1.Node) []int32 {
	var out []int32
	for _, g := range n.Gpus {
		out = append(out, g.FreeMilli)
	}
	return out
}

func TestInventoryNodes(t *testing.T) {
	h100 := func(name string) *nodeBuilder {
		return makeNode(name).GPUs("NVIDIA-H100-80GB-HBM3", "81559", 8).Label(DefaultRackLabel, "rack-a").Label(LabelGPUClique, "c.1").Label(ZoneLabel, "z")
	}
	tests := map[string]struct {
		cfg         Config
		node        *corev1.Node
		pods        []*corev1.Pod
		absent      bool
		free        []int32
		schedulable bool
		reason      string
		cpuFree     int64
	}{
		"idle h100": {node: h100("n").Obj(), free: []int32{1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}, schedulable: true, cpuFree: 64000},
		"whole gpus and cpu used": {node: h100("n").Obj(), pods: []*corev1.Pod{
			makePod("a", "n").Req(ResourceGPU, "4").Req("cpu", "2").Obj(),
			makePod("b", "other").Req(ResourceGPU, "4").Obj(), // other node
			makePod("c", "n").Req(ResourceGPU, "2").Phase(corev1.PodSucceeded).Obj(),
			makePod("d", "").Req(ResourceGPU, "2").Phase(corev1.PodPending).Obj(), // not bound
		}, free: []int32{0, 0, 0, 0, 1000, 1000, 1000, 1000}, schedulable: true, cpuFree: 62000},
		"kai and hami fractions best fit": {node: h100("n").Obj(), pods: []*corev1.Pod{
			makePod("a", "n").Ann(AnnotationGPUFraction, "0.5").Obj(),
			makePod("b", "n").Ann(AnnotationGPUFraction, "0.25").Obj(),
			makePod("c", "n").Req(ResourceGPU, "1").Req(ResourceGPUCores, "30").Obj(),
		}, free: []int32{250, 700, 1000, 1000, 1000, 1000, 1000, 1000}, schedulable: true, cpuFree: 64000},
		"time slicing replicas": {cfg: Config{SharedReplicas: 4}, node: makeNode("n").GPUs("NVIDIA-H100-80GB-HBM3", "81559", 8).Obj(), pods: []*corev1.Pod{
			makePod("a", "n").Req(ResourceGPU, "3").Obj(),
		}, free: []int32{250, 1000}, schedulable: true, cpuFree: 64000},
		"cordoned":  {node: h100("n").Cordon().Obj(), free: []int32{1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}, reason: "cordoned", cpuFree: 64000},
		"not ready": {node: h100("n").NotReady().Obj(), free: []int32{1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}, reason: "not-ready", cpuFree: 64000},
		"tainted":   {node: h100("n").Taint("dedicated").Obj(), free: []int32{1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}, reason: "taint-dedicated", cpuFree: 64000},
		"tolerated": {cfg: Config{Tolerations: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}}, node: h100("n").Taint("dedicated").Obj(), free: []int32{1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}, schedulable: true, cpuFree: 64000},
		"gpu taint": {node: h100("n").Taint(ResourceGPU).Obj(), free: []int32{1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}, schedulable: true, cpuFree: 64000},
		"cpu node":  {node: makeNode("n").Obj(), absent: true},
		"selector":  {cfg: Config{NodeSelector: map[string]string{"pool": "gpu"}}, node: h100("n").Obj(), absent: true},
		"selected":  {cfg: Config{NodeSelector: map[string]string{"pool": "gpu"}}, node: h100("n").Label("pool", "gpu").Obj(), free: []int32{1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}, schedulable: true, cpuFree: 64000},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			inv := BuildInventory(mustCfg(tc.cfg), []*corev1.Node{tc.node}, tc.pods)
			if inv.Labels[LabelConnector] != Kind {
				t.Fatalf("cluster labels %v", inv.Labels)
			}
			if tc.absent {
				if len(inv.Nodes) != 0 {
					t.Fatalf("node advertised: %v", inv.Nodes[0])
				}
				return
			}
			if len(inv.Nodes) != 1 {
				t.Fatalf("%d nodes", len(inv.Nodes))
			}
			n := inv.Nodes[0]
			if got := freeMilli(n); !equal(got, tc.free) {
				t.Fatalf("free milli %v, want %v", got, tc.free)
			}
			if n.Schedulable != tc.schedulable || n.Labels[LabelNodeReason] != tc.reason {
				t.Fatalf("schedulable %v reason %q, want %v %q", n.Schedulable, n.Labels[LabelNodeReason], tc.schedulable, tc.reason)
			}
			if n.CpuMilliFree != tc.cpuFree || n.CpuMilliTotal != 64000 {
				t.Fatalf("cpu free %d total %d", n.CpuMilliFree, n.CpuMilliTotal)
			}
			if n.AcceleratorClass != "nvidia-h100-80gb" || n.Gpus[0].TotalMemoryMib != 81559 {
				t.Fatalf("class %q memory %d", n.AcceleratorClass, n.Gpus[0].TotalMemoryMib)
			}
		})
	}
}

func equal(a, b []int32) bool {
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

func TestInventoryTopologyAndMIG(t *testing.T) {
	cfg := mustCfg(Config{RackLabel: "example.com/rack", FractionalModes: []string{ModeMIG, ModeHAMi, ModeKAI}, Labels: map[string]string{"region": "eu"}})
	mig := makeNode("mig").GPUs("NVIDIA-A100-SXM4-80GB", "81920", 4).Label(LabelGPUCount, "6").
		Label("example.com/rack", "r7").Label(LabelGPUClique, "cl.2").Res("nvidia.com/mig-1g.10gb", 14).Res("nvidia.com/mig-3g.40gb", 2).Obj()
	pods := []*corev1.Pod{
		makePod("a", "mig").Req("nvidia.com/mig-1g.10gb", "8").Obj(),
		makePod("b", "mig").Req(ResourceGPU, "1").Obj(),
	}
	inv := BuildInventory(cfg, []*corev1.Node{makeNode("zzz").GPUs("NVIDIA-L4", "23034", 1).Obj(), mig}, pods)
	if len(inv.Nodes) != 2 || inv.Nodes[0].Name != "mig" {
		t.Fatalf("nodes not sorted by name: %v", inv.Nodes)
	}
	if inv.Labels["region"] != "eu" {
		t.Fatalf("labels %v", inv.Labels)
	}
	wantModes := []meridianv1.FractionalMode{meridianv1.FractionalMode_FRACTIONAL_MODE_MIG, meridianv1.FractionalMode_FRACTIONAL_MODE_MEMORY}
	if len(inv.FractionalModes) != 2 || inv.FractionalModes[0] != wantModes[0] || inv.FractionalModes[1] != wantModes[1] {
		t.Fatalf("modes %v, want %v", inv.FractionalModes, wantModes)
	}
	n := inv.Nodes[0]
	if n.Rack != "r7" || n.NvlinkDomain != "cl.2" || n.AcceleratorClass != "nvidia-a100-80gb" {
		t.Fatalf("rack %q nvlink %q class %q", n.Rack, n.NvlinkDomain, n.AcceleratorClass)
	}
	if len(n.Gpus) != 6 {
		t.Fatalf("%d GPUs, want 4 whole + 2 MIG", len(n.Gpus))
	}
	if got := freeMilli(n)[:4]; !equal(got, []int32{0, 1000, 1000, 1000}) {
		t.Fatalf("whole GPUs free %v", got)
	}
	// 14 1g.10gb over 2 GPUs = 7 each; 8 used: first GPU full, second has 6 free.
	type slice struct{ free, total int32 }
	got := map[int]map[string]slice{}
	for i, g := range n.Gpus[4:] {
		got[i] = map[string]slice{}
		for _, s := range g.MigProfiles {
			got[i][s.Profile] = slice{s.Free, s.Total}
		}
	}
	if got[0]["1g.10gb"] != (slice{0, 7}) || got[1]["1g.10gb"] != (slice{6, 7}) || got[0]["3g.40gb"] != (slice{1, 1}) {
		t.Fatalf("mig slices %v", got)
	}
	// Second MIG GPU: 6x1 + 1x3 free slices = 9 of 7, capped at 1000.
	if n.Gpus[5].FreeMilli != 1000 || n.Gpus[4].FreeMilli != 428 {
		t.Fatalf("mig free milli %d %d", n.Gpus[4].FreeMilli, n.Gpus[5].FreeMilli)
	}
	if inv.MIGStrategy != agentv1.MigStrategy_MIG_STRATEGY_MIXED {
		t.Fatalf("MIG strategy %v, want MIXED (nvidia.com/mig-<profile> resources)", inv.MIGStrategy)
	}
	if plain := BuildInventory(cfg, []*corev1.Node{makeNode("zzz").GPUs("NVIDIA-L4", "23034", 1).Obj()}, nil); plain.MIGStrategy != agentv1.MigStrategy_MIG_STRATEGY_NONE {
		t.Fatalf("MIG strategy without MIG resources %v, want NONE", plain.MIGStrategy)
	}
	v := viewOf(cfg, []*corev1.Node{mig})
	if len(v.migProfiles) != 2 || v.classProducts["nvidia-a100-80gb"][0] != "NVIDIA-A100-SXM4-80GB" {
		t.Fatalf("view %+v", v)
	}
}
