package slurm

import (
	"fmt"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// dispatchBuilder builds test dispatches fluently.
type dispatchBuilder struct{ d *agentv1.Dispatch }

func newDispatch(id string) *dispatchBuilder {
	return &dispatchBuilder{d: &agentv1.Dispatch{DispatchId: id, WorkloadId: "wl-" + id, Workload: &meridianv1.Workload{
		Id:      "wl-" + id,
		PodSets: []*meridianv1.PodSet{{Name: "main", Replicas: 1, Resources: &meridianv1.Resources{GpuMilli: 1000}}},
		Runtime: &meridianv1.RuntimeTemplate{Kind: &meridianv1.RuntimeTemplate_Slurm{Slurm: &meridianv1.SlurmTemplate{Script: "#!/bin/bash\ntrue\n"}}},
	}}}
}

func (b *dispatchBuilder) ps() *meridianv1.PodSet { return b.d.Workload.PodSets[0] }
func (b *dispatchBuilder) slurm() *meridianv1.SlurmTemplate {
	return b.d.Workload.Runtime.GetSlurm()
}
func (b *dispatchBuilder) Replicas(n int32) *dispatchBuilder { b.ps().Replicas = n; return b }
func (b *dispatchBuilder) Min(n int32) *dispatchBuilder      { b.ps().MinReplicas = n; return b }

// Admitted sets the size the hub admitted, with a hint naming that many nodes.
func (b *dispatchBuilder) Admitted(n int32) *dispatchBuilder {
	nodes := make([]string, n)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("gpu%d", i+1)
	}
	b.d.Placement = []*agentv1.PodSetPlacement{{PodSet: "main", Nodes: nodes, Replicas: n}}
	return b
}
func (b *dispatchBuilder) Milli(m int32) *dispatchBuilder { b.ps().Resources.GpuMilli = m; return b }
func (b *dispatchBuilder) Mode(m meridianv1.FractionalMode) *dispatchBuilder {
	b.ps().Resources.FractionalMode = m
	return b
}
func (b *dispatchBuilder) Class(c string) *dispatchBuilder {
	b.ps().Resources.AcceleratorClass = c
	return b
}
func (b *dispatchBuilder) Topology(t meridianv1.Topology) *dispatchBuilder {
	b.ps().Topology = t
	return b
}
func (b *dispatchBuilder) CPU(m, mem int32) *dispatchBuilder {
	b.ps().Resources.CpuMilli, b.ps().Resources.MemoryMib = m, mem
	return b
}
func (b *dispatchBuilder) Hint(nodes ...string) *dispatchBuilder {
	b.d.Placement = []*agentv1.PodSetPlacement{{PodSet: "main", Nodes: nodes}}
	return b
}
func (b *dispatchBuilder) Extra(k string, v any) *dispatchBuilder {
	if b.d.Workload.Runtime.Extra == nil {
		b.d.Workload.Runtime.Extra = &structpb.Struct{Fields: map[string]*structpb.Value{}}
	}
	val, err := structpb.NewValue(v)
	if err != nil {
		panic(err)
	}
	b.d.Workload.Runtime.Extra.Fields[k] = val
	return b
}
func (b *dispatchBuilder) Script(s string) *dispatchBuilder { b.slurm().Script = s; return b }
func (b *dispatchBuilder) Env(k, v string) *dispatchBuilder {
	if b.slurm().Env == nil {
		b.slurm().Env = map[string]string{}
	}
	b.slurm().Env[k] = v
	return b
}
func (b *dispatchBuilder) TimeLimit(d time.Duration) *dispatchBuilder {
	b.slurm().TimeLimit = durationpb.New(d)
	return b
}
func (b *dispatchBuilder) NoSlurm() *dispatchBuilder {
	b.d.Workload.Runtime = &meridianv1.RuntimeTemplate{Kind: &meridianv1.RuntimeTemplate_Container{Container: &meridianv1.ContainerTemplate{Image: "x"}}}
	return b
}
func (b *dispatchBuilder) Obj() *agentv1.Dispatch { return b.d }

func testShape() shape {
	return shape{partition: "gpu", workdir: "/tmp", clusterID: "c1", gpusPerNode: 8, mpsPerGPU: 100, shardsPerGPU: 4,
		gresTypeOf: map[string]string{"nvidia-h100-80gb": "h100"}, hasMPS: true, hasShard: true, canSwitches: true,
		switchesForTop: true, defaultPath: "/usr/bin:/bin"}
}

func TestTranslate(t *testing.T) {
	type want struct {
		nodes, perNode, switches int
		gres, nodelist           string
		mem                      int64
		cpus                     int
		milli                    int64
	}
	tests := map[string]struct {
		d    *agentv1.Dispatch
		sh   func(*shape)
		want want
	}{
		"one GPU":                         {d: newDispatch("a").Obj(), want: want{nodes: 1, perNode: 1, gres: "gpu:1", milli: 1000}},
		"2 nodes x 8 GPUs, class":         {d: newDispatch("a").Replicas(2).Milli(8000).Class("nvidia-h100-80gb").Obj(), want: want{nodes: 2, perNode: 1, gres: "gpu:h100:8", milli: 16000}},
		"16 x 1 GPU packs 8/node":         {d: newDispatch("a").Replicas(16).Milli(1000).Obj(), want: want{nodes: 2, perNode: 8, gres: "gpu:8", milli: 16000}},
		"3 x 4 GPUs: 3 nodes":             {d: newDispatch("a").Replicas(3).Milli(4000).Obj(), want: want{nodes: 3, perNode: 1, gres: "gpu:4", milli: 12000}},
		"hint layout wins":                {d: newDispatch("a").Replicas(4).Milli(1000).Hint("gpu1", "gpu1", "gpu2", "gpu2").Obj(), want: want{nodes: 2, perNode: 2, gres: "gpu:2", milli: 4000}},
		"rack topology: switches":         {d: newDispatch("a").Replicas(2).Milli(8000).Topology(meridianv1.Topology_TOPOLOGY_RACK).Obj(), want: want{nodes: 2, perNode: 1, switches: 1, gres: "gpu:8", milli: 16000}},
		"nvlink topology":                 {d: newDispatch("a").Replicas(2).Milli(8000).Topology(meridianv1.Topology_TOPOLOGY_NVLINK_DOMAIN).Obj(), want: want{nodes: 2, perNode: 1, switches: 1, gres: "gpu:8", milli: 16000}},
		"one-node rack job: no switches":  {d: newDispatch("a").Replicas(2).Milli(4000).Topology(meridianv1.Topology_TOPOLOGY_RACK).Obj(), want: want{nodes: 1, perNode: 2, gres: "gpu:8", milli: 8000}},
		"same node":                       {d: newDispatch("a").Replicas(4).Milli(2000).Topology(meridianv1.Topology_TOPOLOGY_SAME_NODE).Obj(), want: want{nodes: 1, perNode: 4, gres: "gpu:8", milli: 8000}},
		"switches dropped without sbatch": {d: newDispatch("a").Replicas(2).Milli(8000).Topology(meridianv1.Topology_TOPOLOGY_RACK).Obj(), sh: func(s *shape) { s.canSwitches = false }, want: want{nodes: 2, perNode: 1, gres: "gpu:8", milli: 16000}},
		"pinned hint":                     {d: newDispatch("a").Replicas(2).Milli(8000).Hint("gpu3", "gpu4").Extra(ExtraPinNodes, true).Obj(), want: want{nodes: 2, perNode: 1, gres: "gpu:8", nodelist: "gpu3,gpu4", milli: 16000}},
		"mps half GPU":                    {d: newDispatch("a").Milli(500).Mode(meridianv1.FractionalMode_FRACTIONAL_MODE_MPS).Obj(), want: want{nodes: 1, perNode: 1, gres: "mps:50", milli: 500}},
		"any fraction is mps":             {d: newDispatch("a").Milli(333).Obj(), want: want{nodes: 1, perNode: 1, gres: "mps:34", milli: 333}},
		"shard quarter":                   {d: newDispatch("a").Milli(250).Mode(meridianv1.FractionalMode_FRACTIONAL_MODE_SHARD).Obj(), want: want{nodes: 1, perNode: 1, gres: "shard:1", milli: 250}},
		"time slice rounds up":            {d: newDispatch("a").Milli(300).Mode(meridianv1.FractionalMode_FRACTIONAL_MODE_TIME_SLICE).Obj(), want: want{nodes: 1, perNode: 1, gres: "shard:2", milli: 300}},
		"any without mps is shard":        {d: newDispatch("a").Milli(500).Obj(), sh: func(s *shape) { s.hasMPS = false }, want: want{nodes: 1, perNode: 1, gres: "shard:2", milli: 500}},
		"two fractional replicas":         {d: newDispatch("a").Replicas(2).Milli(500).Obj(), want: want{nodes: 2, perNode: 1, gres: "mps:50", milli: 1000}},
		"cpu and memory":                  {d: newDispatch("a").Replicas(16).Milli(1000).CPU(1500, 1000).Obj(), want: want{nodes: 2, perNode: 8, gres: "gpu:8", cpus: 2, mem: 8000, milli: 16000}},
		"cpu only":                        {d: newDispatch("a").Milli(0).CPU(2000, 0).Obj(), want: want{nodes: 1, perNode: 1, cpus: 2}},
		"elastic: the admitted size":      {d: newDispatch("a").Replicas(4).Min(1).Milli(8000).Admitted(2).Obj(), want: want{nodes: 2, perNode: 1, gres: "gpu:8", milli: 16000}},
		"elastic without a hint: full":    {d: newDispatch("a").Replicas(4).Min(1).Milli(8000).Obj(), want: want{nodes: 4, perNode: 1, gres: "gpu:8", milli: 32000}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			sh := testShape()
			if tc.sh != nil {
				tc.sh(&sh)
			}
			p, err := translate(tc.d, sh)
			if err != nil {
				t.Fatalf("translate: %v", err)
			}
			r := p.req
			got := want{nodes: r.Nodes, perNode: r.TasksPerNode, switches: r.Switches, gres: r.Gres, nodelist: strings.Join(r.NodeList, ","), mem: r.MemoryPerNodeMiB, cpus: r.CPUsPerTask, milli: p.gpuMilli}
			if got != tc.want {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
			if r.Partition != "gpu" || r.Workdir != "/tmp" || r.Name != "meridian-a" {
				t.Errorf("partition %q workdir %q name %q", r.Partition, r.Workdir, r.Name)
			}
			if tag, ok := ParseComment(r.Comment); !ok || tag.DispatchID != "a" || tag.WorkloadID != "wl-a" || tag.ClusterID != "c1" {
				t.Errorf("comment %q", r.Comment)
			}
			if r.Env["MERIDIAN_DISPATCH_ID"] != "a" || r.Env["PATH"] != "/usr/bin:/bin" {
				t.Errorf("env %v", r.Env)
			}
		})
	}
}

func TestTranslateRuntime(t *testing.T) {
	d := newDispatch("rt").Env("FOO", "a,b c").Env("PATH", "/opt/bin").TimeLimit(90*time.Second).
		Extra(ExtraConstraint, "nvlink&leaf1").Extra(ExtraPartition, "debug").Extra(ExtraAccount, "acct").Obj()
	d.Workload.Runtime.GetSlurm().Workdir = "/scratch"
	p, err := translate(d, testShape())
	if err != nil {
		t.Fatal(err)
	}
	r := p.req
	if r.Env["FOO"] != "a,b c" || r.Env["PATH"] != "/opt/bin" || r.TimeLimit != 90*time.Second || r.Constraints != "nvlink&leaf1" ||
		r.Partition != "debug" || r.Account != "acct" || r.Workdir != "/scratch" {
		t.Fatalf("request %+v", r)
	}
	if minutes(r.TimeLimit) != 2 {
		t.Fatalf("90s must round up to 2 minutes, got %d", minutes(r.TimeLimit))
	}
	// The template is not modified.
	if _, ok := d.Workload.Runtime.GetSlurm().Env["MERIDIAN_DISPATCH_ID"]; ok {
		t.Fatal("translate wrote into the dispatch's env map")
	}
	d2 := newDispatch("mem").Milli(500).Obj()
	d2.Workload.PodSets[0].Resources.GpuMemoryMib = 20000
	p, err = translate(d2, testShape())
	if err != nil || p.req.Env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] != "0=20000M" {
		t.Fatalf("mps memory limit: %v %v", err, p.req.Env)
	}
}

func TestTranslateRejects(t *testing.T) {
	tests := map[string]struct {
		d     *agentv1.Dispatch
		sh    func(*shape)
		field string
	}{
		"no dispatch id":     {d: newDispatch("").Obj(), field: "dispatch_id"},
		"dispatch id spaces": {d: newDispatch("a b").Obj(), field: "dispatch_id"},
		"no workload":        {d: &agentv1.Dispatch{DispatchId: "x"}, field: "workload"},
		"container runtime":  {d: newDispatch("a").NoSlurm().Obj(), field: "workload.runtime.slurm"},
		"no shebang":         {d: newDispatch("a").Script("echo hi").Obj(), field: "script"},
		"two pod sets": {d: func() *agentv1.Dispatch {
			d := newDispatch("a").Obj()
			d.Workload.PodSets = append(d.Workload.PodSets, d.Workload.PodSets[0])
			return d
		}(), field: "pod_sets"},
		"zero replicas":      {d: newDispatch("a").Replicas(0).Obj(), field: "replicas"},
		"unknown class":      {d: newDispatch("a").Class("nvidia-a100-40gb").Obj(), field: "accelerator_class"},
		"1500 milli":         {d: newDispatch("a").Milli(1500).Obj(), field: "gpu_milli"},
		"9 GPUs per replica": {d: newDispatch("a").Milli(9000).Obj(), field: "cannot be laid out"},
		"same node too big":  {d: newDispatch("a").Replicas(3).Milli(4000).Topology(meridianv1.Topology_TOPOLOGY_SAME_NODE).Obj(), field: "cannot be laid out"},
		"mig":                {d: newDispatch("a").Milli(500).Mode(meridianv1.FractionalMode_FRACTIONAL_MODE_MIG).Obj(), field: "fractional_mode"},
		"admitted below min": {d: newDispatch("a").Replicas(4).Min(2).Milli(1000).Admitted(1).Obj(), field: "placement[main].replicas"},
		"mps missing":        {d: newDispatch("a").Milli(500).Mode(meridianv1.FractionalMode_FRACTIONAL_MODE_MPS).Obj(), sh: func(s *shape) { s.hasMPS = false }, field: "fractional_mode"},
		"shard missing":      {d: newDispatch("a").Milli(500).Mode(meridianv1.FractionalMode_FRACTIONAL_MODE_SHARD).Obj(), sh: func(s *shape) { s.hasShard = false }, field: "fractional_mode"},
		"memory only": {d: func() *agentv1.Dispatch {
			d := newDispatch("a").Milli(0).Obj()
			d.Workload.PodSets[0].Resources.GpuMemoryMib = 100
			return d
		}(), field: "gpu_milli"},
		"pin without hint":    {d: newDispatch("a").Extra(ExtraPinNodes, true).Obj(), field: "pin_nodes"},
		"pin without sbatch":  {d: newDispatch("a").Hint("gpu1").Extra(ExtraPinNodes, true).Obj(), sh: func(s *shape) { s.canSwitches = false }, field: "pin_nodes"},
		"pin not bool":        {d: newDispatch("a").Extra(ExtraPinNodes, "yes").Obj(), field: "pin_nodes"},
		"constraint not text": {d: newDispatch("a").Extra(ExtraConstraint, 3.0).Obj(), field: "extra.constraint"},
		"relative workdir": {d: func() *agentv1.Dispatch {
			d := newDispatch("a").Obj()
			d.Workload.Runtime.GetSlurm().Workdir = "rel"
			return d
		}(), field: "workdir"},
		"bad env name":  {d: newDispatch("a").Env("A=B", "x").Obj(), field: "env"},
		"negative time": {d: newDispatch("a").TimeLimit(-time.Second).Obj(), field: "time_limit"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			sh := testShape()
			if tc.sh != nil {
				tc.sh(&sh)
			}
			_, err := translate(tc.d, sh)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("translate error = %v, want one naming %q", err, tc.field)
			}
		})
	}
}

func TestGPUMilliOfJob(t *testing.T) {
	tests := map[string]struct {
		j    JobInfo
		want int64
	}{
		"gang":     {JobInfo{TresPerNode: "gres:gpu:h100:8", NodeCount: 2}, 16000},
		"untyped":  {JobInfo{TresPerNode: "gres:gpu:2", NodeCount: 1}, 2000},
		"mps":      {JobInfo{TresPerNode: "gres:mps:50", NodeCount: 1}, 500},
		"shard":    {JobInfo{TresPerNode: "gres:shard:2"}, 500},
		"cpu only": {JobInfo{TresPerNode: "", NodeCount: 3}, 0},
		"garbage":  {JobInfo{TresPerNode: "gres:gpu:x", NodeCount: 1}, 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := gpuMilliOfJob(tc.j, 100, 4); got != tc.want {
				t.Fatalf("gpuMilliOfJob = %d, want %d", got, tc.want)
			}
		})
	}
}
