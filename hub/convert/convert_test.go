package convert

import (
	"strings"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/hub/quota"
	"github.com/meridian-gpu/meridian/hub/scheduler"
	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestRequest(t *testing.T) {
	tests := map[string]struct {
		in      *meridianv1.Resources
		want    gpufit.Request
		wantErr string
	}{
		"nil is cpu-only zero":  {in: nil, want: gpufit.Request{}},
		"two whole gpus":        {in: &meridianv1.Resources{GpuMilli: 2000, CpuMilli: 500, MemoryMib: 1024}, want: gpufit.Request{GPUs: 2, Milli: 1000, CPUMilli: 500, MemMiB: 1024}},
		"one whole gpu":         {in: &meridianv1.Resources{GpuMilli: 1000}, want: gpufit.Request{GPUs: 1, Milli: 1000}},
		"fraction of one gpu":   {in: &meridianv1.Resources{GpuMilli: 250, GpuMemoryMib: 4096}, want: gpufit.Request{GPUs: 1, Milli: 250, GPUMemMiB: 4096}},
		"memory-only share":     {in: &meridianv1.Resources{GpuMemoryMib: 8192}, want: gpufit.Request{GPUs: 1, Milli: 1, GPUMemMiB: 8192}},
		"cpu only":              {in: &meridianv1.Resources{CpuMilli: 4000}, want: gpufit.Request{CPUMilli: 4000}},
		"negative gpu_milli":    {in: &meridianv1.Resources{GpuMilli: -1}, wantErr: "gpu_milli"},
		"non-multiple above 1k": {in: &meridianv1.Resources{GpuMilli: 1500}, wantErr: "gpu_milli"},
		"negative memory":       {in: &meridianv1.Resources{MemoryMib: -5}, wantErr: "memory_mib"},
		"negative gpu memory":   {in: &meridianv1.Resources{GpuMilli: 500, GpuMemoryMib: -5}, wantErr: "gpu_memory_mib"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Request(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestWorkload(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	base := func() *meridianv1.Workload {
		return &meridianv1.Workload{
			Id: "w1", Queue: "acme/ml/train", Priority: 7, Preemptible: true,
			ClusterSelector: map[string]string{"region": "eu"},
			CreateTime:      timestamppb.New(created),
			PodSets: []*meridianv1.PodSet{
				{Name: "workers", Replicas: 4, MinReplicas: 2, Topology: meridianv1.Topology_TOPOLOGY_NVLINK_DOMAIN,
					Resources: &meridianv1.Resources{GpuMilli: 8000, AcceleratorClass: "nvidia-h100-80gb"}},
				{Replicas: 1, Resources: &meridianv1.Resources{GpuMilli: 500, FractionalMode: meridianv1.FractionalMode_FRACTIONAL_MODE_MIG}},
			},
		}
	}
	tests := map[string]struct {
		mut     func(w *meridianv1.Workload)
		avoid   []string
		check   func(t *testing.T, w *scheduler.Workload)
		wantErr string
	}{
		"full gang": {
			avoid: []string{"west", "east"},
			check: func(t *testing.T, w *scheduler.Workload) {
				if w.ID != "w1" || w.Queue != "acme/ml/train" || w.Priority != 7 || !w.Preemptible || !w.CreatedAt.Equal(created) {
					t.Fatalf("header wrong: %+v", w)
				}
				if w.ClusterSelector["region"] != "eu" {
					t.Fatalf("selector lost: %v", w.ClusterSelector)
				}
				if strings.Join(w.AvoidClusters, ",") != "east,west" {
					t.Fatalf("avoid = %v, want sorted east,west", w.AvoidClusters)
				}
				if len(w.PodSets) != 2 {
					t.Fatalf("pod sets = %d", len(w.PodSets))
				}
				p0, p1 := w.PodSets[0], w.PodSets[1]
				if p0.Name != "workers" || p0.Replicas != 4 || p0.MinReplicas != 2 || p0.Class != "nvidia-h100-80gb" ||
					p0.Req.GPUs != 8 || p0.Req.Milli != 1000 || p0.Topology != scheduler.TopologyNVLink || p0.Mode != scheduler.FracAny {
					t.Fatalf("pod set 0 = %+v", p0)
				}
				if p1.Name != "podset-1" || p1.Req.GPUs != 1 || p1.Req.Milli != 500 || p1.Mode != scheduler.FracMIG || p1.Topology != scheduler.TopologyCluster {
					t.Fatalf("pod set 1 = %+v", p1)
				}
			},
		},
		"no pod sets":          {mut: func(w *meridianv1.Workload) { w.PodSets = nil }, wantErr: "pod_sets"},
		"empty id":             {mut: func(w *meridianv1.Workload) { w.Id = "" }, wantErr: "id"},
		"zero replicas":        {mut: func(w *meridianv1.Workload) { w.PodSets[0].Replicas = 0 }, wantErr: "pod_sets[0].replicas"},
		"min above replicas":   {mut: func(w *meridianv1.Workload) { w.PodSets[0].MinReplicas = 9 }, wantErr: "pod_sets[0].min_replicas"},
		"bad gpu_milli":        {mut: func(w *meridianv1.Workload) { w.PodSets[1].Resources.GpuMilli = 1200 }, wantErr: "pod_sets[1].resources.gpu_milli"},
		"unknown mode":         {mut: func(w *meridianv1.Workload) { w.PodSets[1].Resources.FractionalMode = 99 }, wantErr: "pod_sets[1].resources.fractional_mode"},
		"unknown topology":     {mut: func(w *meridianv1.Workload) { w.PodSets[0].Topology = 42 }, wantErr: "pod_sets[0].topology"},
		"nil pod set rejected": {mut: func(w *meridianv1.Workload) { w.PodSets[0] = nil }, wantErr: "pod_sets[0]"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			w := base()
			if tc.mut != nil {
				tc.mut(w)
			}
			before := proto.Clone(w)
			got, err := Workload(w, tc.avoid)
			if !proto.Equal(before, w) {
				t.Fatal("Workload mutated its input")
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, got)
		})
	}
}

func gpu(i int32, free int32, healthy bool) *agentv1.Gpu {
	return &agentv1.Gpu{Index: i, FreeMilli: free, FreeMemoryMib: int64(free) * 80, TotalMemoryMib: 81920, Healthy: healthy}
}

func TestCluster(t *testing.T) {
	seen := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	ad := func() *agentv1.Advertisement {
		return &agentv1.Advertisement{
			ClusterId: "east", Labels: map[string]string{"region": "us"},
			FractionalModes: []meridianv1.FractionalMode{meridianv1.FractionalMode_FRACTIONAL_MODE_MPS, meridianv1.FractionalMode_FRACTIONAL_MODE_MIG},
			Nodes: []*agentv1.Node{
				{Name: "n2", AcceleratorClass: "h100", Rack: "r1", NvlinkDomain: "nv1", Schedulable: true, CpuMilliFree: 1000, MemoryMibFree: 2000,
					Gpus: []*agentv1.Gpu{gpu(1, 300, true), gpu(0, 1000, true)}},
				{Name: "n1", AcceleratorClass: "h100", Schedulable: true, Gpus: []*agentv1.Gpu{gpu(0, 1000, false), gpu(1, 1000, true)}},
				{Name: "n3", AcceleratorClass: "a100", Schedulable: false, CpuMilliFree: 500, Gpus: []*agentv1.Gpu{gpu(0, 1000, true)}},
			},
		}
	}
	tests := map[string]struct {
		mut     func(a *agentv1.Advertisement)
		check   func(t *testing.T, c scheduler.Cluster)
		wantErr string
	}{
		"nodes sorted, gpus by index, unhealthy and cordoned offer nothing": {
			check: func(t *testing.T, c scheduler.Cluster) {
				if c.ID != "east" || c.Labels["region"] != "us" || c.State != scheduler.ClusterDraining || !c.LastSeen.Equal(seen) {
					t.Fatalf("header = %+v", c)
				}
				if !c.Modes.Has(scheduler.FracMPS) || !c.Modes.Has(scheduler.FracMIG) || c.Modes.Has(scheduler.FracShard) {
					t.Fatalf("modes = %b", c.Modes)
				}
				var names []string
				for _, n := range c.Nodes {
					names = append(names, n.Name)
				}
				if strings.Join(names, ",") != "n1,n2,n3" {
					t.Fatalf("nodes = %v", names)
				}
				n1, n2, n3 := c.Nodes[0], c.Nodes[1], c.Nodes[2]
				if n1.Res.GPUs[0].FreeMilli != 0 || n1.Res.GPUs[1].FreeMilli != 1000 {
					t.Fatalf("n1 gpus = %+v (gpu 0 is unhealthy)", n1.Res.GPUs)
				}
				if n2.Res.GPUs[0].FreeMilli != 1000 || n2.Res.GPUs[1].FreeMilli != 300 || n2.Rack != "r1" || n2.NVLink != "nv1" || n2.Res.CPUMilliFree != 1000 {
					t.Fatalf("n2 = %+v", n2)
				}
				if n3.Res.FreeMilli() != 0 || n3.Res.CPUMilliFree != 0 || n3.Res.Class != "a100" {
					t.Fatalf("cordoned n3 = %+v", n3)
				}
			},
		},
		"any mode means all": {
			mut: func(a *agentv1.Advertisement) {
				a.FractionalModes = []meridianv1.FractionalMode{meridianv1.FractionalMode_FRACTIONAL_MODE_ANY}
			},
			check: func(t *testing.T, c scheduler.Cluster) {
				for _, m := range []scheduler.FractionalMode{scheduler.FracMPS, scheduler.FracMIG, scheduler.FracTimeSlice, scheduler.FracMemory, scheduler.FracShard} {
					if !c.Modes.Has(m) {
						t.Fatalf("mode %s missing", m)
					}
				}
			},
		},
		"empty cluster id":   {mut: func(a *agentv1.Advertisement) { a.ClusterId = "" }, wantErr: "cluster_id"},
		"duplicate node":     {mut: func(a *agentv1.Advertisement) { a.Nodes[1].Name = "n2" }, wantErr: "nodes[1].name"},
		"gpu index gap":      {mut: func(a *agentv1.Advertisement) { a.Nodes[0].Gpus[0].Index = 5 }, wantErr: "nodes[0].gpus[1].index"},
		"free milli too big": {mut: func(a *agentv1.Advertisement) { a.Nodes[2].Gpus[0].FreeMilli = 1001 }, wantErr: "nodes[2].gpus[0].free_milli"},
		"nameless node":      {mut: func(a *agentv1.Advertisement) { a.Nodes[0].Name = "" }, wantErr: "nodes[0].name"},
		"unknown mode":       {mut: func(a *agentv1.Advertisement) { a.FractionalModes = []meridianv1.FractionalMode{77} }, wantErr: "fractional_modes[0]"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := ad()
			if tc.mut != nil {
				tc.mut(a)
			}
			c, err := Cluster(a, scheduler.ClusterDraining, seen)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func TestCapacity(t *testing.T) {
	ad := &agentv1.Advertisement{Nodes: []*agentv1.Node{
		{Name: "a", AcceleratorClass: "h100", Schedulable: true, Gpus: []*agentv1.Gpu{gpu(0, 1000, true), gpu(1, 400, true), gpu(2, 1000, false)}},
		{Name: "b", AcceleratorClass: "h100", Schedulable: false, Gpus: []*agentv1.Gpu{gpu(0, 1000, true)}},
		{Name: "c", AcceleratorClass: "a100", Schedulable: true, Gpus: []*agentv1.Gpu{gpu(0, 1000, true)}},
		{Name: "cpu", Schedulable: true},
	}}
	got := Capacity(ad)
	if len(got) != 2 || got[0].AcceleratorClass != "a100" || got[1].AcceleratorClass != "h100" {
		t.Fatalf("classes = %v", got)
	}
	h := got[1]
	if h.TotalMilli != 4000 || h.FreeMilli != 1400 || h.Nodes != 2 || h.FreeWholeGpus != 1 {
		t.Fatalf("h100 = %+v", h)
	}
	if a := got[0]; a.TotalMilli != 1000 || a.FreeMilli != 1000 || a.FreeWholeGpus != 1 || a.Nodes != 1 {
		t.Fatalf("a100 = %+v", a)
	}
}

func TestQueueTree(t *testing.T) {
	lim := int64(2000)
	qs := []*meridianv1.Queue{
		{Path: "acme/ml", Weight: 3, Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: "h100", NominalMilliGpus: 8000, BorrowLimitMilli: &lim}}},
		{Path: "acme", Quotas: []*meridianv1.QueueQuota{{NominalMilliGpus: 16000}}},
		{Path: "Bad Path"},
	}
	tree, bad, err := QueueTree(qs)
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) != 1 || !strings.Contains(bad[0], "Bad Path") {
		t.Fatalf("bad = %v, want the invalid path reported", bad)
	}
	l, ok := tree.Limits("acme/ml", "h100")
	if !ok || l.Nominal != 8000 || l.BorrowLimit != 2000 || l.LendLimit != quota.Unlimited {
		t.Fatalf("acme/ml h100 = %+v %v", l, ok)
	}
	if tree.Weight("acme/ml") != 3 {
		t.Fatalf("weight = %v", tree.Weight("acme/ml"))
	}
	if l, ok := tree.Limits("acme", "anything"); !ok || l.Nominal != 16000 {
		t.Fatalf("acme any-class = %+v %v", l, ok)
	}
	if _, err := QueueSpec(&meridianv1.Queue{Path: "x", Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: "h"}, {AcceleratorClass: "h"}}}); err == nil || !strings.Contains(err.Error(), "quotas[1]") {
		t.Fatalf("duplicate class err = %v", err)
	}
}

func TestPlacementAndMsgIDs(t *testing.T) {
	p := Placement([]scheduler.PodSetPlacement{
		{PodSet: "w", Replicas: []scheduler.ReplicaPlacement{{Node: "n1", GPUs: []int{0, 1}}, {Node: "n2"}}},
		{PodSet: "ps", Replicas: []scheduler.ReplicaPlacement{{Node: "n3"}}},
	})
	if len(p) != 2 || p[0].PodSet != "w" || strings.Join(p[0].Nodes, ",") != "n1,n2" || p[1].Nodes[0] != "n3" {
		t.Fatalf("placement = %v", p)
	}
	id, ok := IsCancelMsgID(CancelMsgID("d-1"))
	if !ok || id != "d-1" {
		t.Fatalf("round trip = %q %v", id, ok)
	}
	if _, ok := IsCancelMsgID("d-1"); ok {
		t.Fatal("a bare dispatch id must not read as a cancel")
	}
}

// TestNodeSortsGPUsByIndex: GPUs listed out of order come out by index,
// and the advertisement's own list (shared by the fleet's readers) is not
// reordered.
func TestNodeSortsGPUsByIndex(t *testing.T) {
	n := &agentv1.Node{Name: "n1", Schedulable: true, Gpus: []*agentv1.Gpu{
		{Index: 2, FreeMilli: 200, Healthy: true}, {Index: 0, FreeMilli: 0, Healthy: true}, {Index: 1, FreeMilli: 100, Healthy: true},
	}}
	got, err := Node(n)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range got.Res.GPUs {
		if want := int32(i * 100); g.FreeMilli != want {
			t.Fatalf("gpu %d free %d, want %d (sorted by index)", i, g.FreeMilli, want)
		}
	}
	if n.Gpus[0].GetIndex() != 2 {
		t.Fatalf("the advertisement's GPUs were reordered in place: first is %d", n.Gpus[0].GetIndex())
	}
	if _, err := Node(&agentv1.Node{Name: "n2", Gpus: []*agentv1.Gpu{{Index: 0}, {Index: 0}}}); err == nil || !strings.Contains(err.Error(), "gpus[1].index") {
		t.Fatalf("repeated index: err %v, want one naming gpus[1].index", err)
	}
}
