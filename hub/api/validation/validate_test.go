package validation

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

func TestValidateWorkloadAcceptsGoodInput(t *testing.T) {
	tests := map[string]*meridianv1.Workload{
		"minimal":         {Queue: "acme", PodSets: []*meridianv1.PodSet{{Name: "main", Replicas: 1}}},
		"builder default": makeWorkload("acme/vision/train").Obj(),
		"fractional mps": makeWorkload("acme/vision").PodSets(
			makePodSet("worker", 4).GPU(250).Mode(meridianv1.FractionalMode_FRACTIONAL_MODE_MPS).Obj()).Obj(),
		"memory slice without milli": makeWorkload("acme").PodSets(
			makePodSet("worker", 1).GPUMemory(10240).Mode(meridianv1.FractionalMode_FRACTIONAL_MODE_MEMORY).Obj()).Obj(),
		"eight gpus nvlink elastic": makeWorkload("acme/llm/pretrain").PodSets(
			makePodSet("launcher", 1).Obj(),
			makePodSet("worker", 64).GPU(8000).Class("nvidia-h100-80gb").Min(32).
				Topology(meridianv1.Topology_TOPOLOGY_NVLINK_DOMAIN).Obj()).Obj(),
		"same node at the limit": makeWorkload("acme").PodSets(
			makePodSet("w", 8).GPU(8000).Topology(meridianv1.Topology_TOPOLOGY_SAME_NODE).Obj()).Obj(),
		"labels and selector": makeWorkload("acme").Label("team", "vision").
			Label("meridian.dev/tier", "batch").Selector("region", "eu-west-1").Selector("gpu", "").Obj(),
		"priority bounds and key": makeWorkload("a-1/b-2/c-3").Mutate(func(w *meridianv1.Workload) {
			w.Priority = MinPriority
			w.IdempotencyKey = strings.Repeat("k", MaxIdempotencyKeyLen)
		}).Obj(),
		"slurm runtime with extra": makeWorkload("hpc").Mutate(func(w *meridianv1.Workload) {
			extra, _ := structpb.NewStruct(map[string]any{"partition": "gpu", "qos": "high"})
			w.Runtime = &meridianv1.RuntimeTemplate{
				Kind: &meridianv1.RuntimeTemplate_Slurm{Slurm: &meridianv1.SlurmTemplate{
					Script: "#!/bin/bash\nsrun python train.py\n", TimeLimit: durationpb.New(3600e9)}},
				Extra: extra,
			}
		}).Obj(),
		"sixteen pod sets": makeWorkload("acme").Mutate(func(w *meridianv1.Workload) {
			w.PodSets = nil
			for i := 0; i < MaxPodSets; i++ {
				w.PodSets = append(w.PodSets, makePodSet(fmt.Sprintf("ps-%d", i), 1).Obj())
			}
		}).Obj(),
		"total replicas at the limit": makeWorkload("acme").PodSets(
			makePodSet("a", MaxReplicas).Obj(), makePodSet("b", MaxReplicas).Obj(), makePodSet("c", MaxReplicas).Obj(),
			makePodSet("d", MaxReplicas).Obj(), makePodSet("e", MaxReplicas).Obj(), makePodSet("f", MaxReplicas).Obj(),
			makePodSet("g", MaxReplicas).Obj(), makePodSet("h", MaxReplicas).Obj(), makePodSet("i", MaxReplicas).Obj(),
			makePodSet("j", MaxReplicas).Obj()).Obj(),
	}
	for name, w := range tests {
		t.Run(name, func(t *testing.T) {
			before := proto.Clone(w)
			if err := ValidateWorkload(w); err != nil {
				t.Fatalf("ValidateWorkload() = %v, want nil", err)
			}
			if !proto.Equal(before, w) {
				t.Fatal("ValidateWorkload modified its input")
			}
		})
	}
}

func TestValidateWorkloadRejectsBadInput(t *testing.T) {
	ps := func(mutate func(p *meridianv1.PodSet)) func(*meridianv1.Workload) {
		return func(w *meridianv1.Workload) { mutate(w.PodSets[0]) }
	}
	res := func(mutate func(r *meridianv1.Resources)) func(*meridianv1.Workload) {
		return ps(func(p *meridianv1.PodSet) { mutate(p.Resources) })
	}
	tests := map[string]struct {
		mutate    func(*meridianv1.Workload)
		wantField string
		wantDesc  string // substring of the violation's description
	}{
		"id set":                 {func(w *meridianv1.Workload) { w.Id = "wl-1" }, "id", "assigned by the server"},
		"status set":             {func(w *meridianv1.Workload) { w.Status = &meridianv1.WorkloadStatus{} }, "status", "set by the server"},
		"create_time set":        {func(w *meridianv1.Workload) { w.CreateTime = timestamppb.New(timestamppb.Now().AsTime()) }, "create_time", "set by the server"},
		"name upper case":        {func(w *meridianv1.Workload) { w.Name = "Train" }, "name", "DNS-1123"},
		"name too long":          {func(w *meridianv1.Workload) { w.Name = strings.Repeat("a", 64) }, "name", "at most 63"},
		"queue missing":          {func(w *meridianv1.Workload) { w.Queue = "" }, "queue", "required"},
		"queue four segments":    {func(w *meridianv1.Workload) { w.Queue = "a/b/c/d" }, "queue", "4 segments"},
		"queue empty segment":    {func(w *meridianv1.Workload) { w.Queue = "a//c" }, "queue", "empty segment 2"},
		"queue trailing slash":   {func(w *meridianv1.Workload) { w.Queue = "a/b/" }, "queue", "empty segment 3"},
		"queue bad char":         {func(w *meridianv1.Workload) { w.Queue = "acme/Vision" }, "queue", "segment 2"},
		"queue segment too long": {func(w *meridianv1.Workload) { w.Queue = "acme/" + strings.Repeat("x", 64) }, "queue", "at most 63"},
		"priority too high":      {func(w *meridianv1.Workload) { w.Priority = MaxPriority + 1 }, "priority", "between"},
		"priority too low":       {func(w *meridianv1.Workload) { w.Priority = MinPriority - 1 }, "priority", "between"},
		"no pod sets":            {func(w *meridianv1.Workload) { w.PodSets = nil }, "pod_sets", "at least one"},
		"seventeen pod sets": {func(w *meridianv1.Workload) {
			w.PodSets = nil
			for i := 0; i <= MaxPodSets; i++ {
				w.PodSets = append(w.PodSets, makePodSet(fmt.Sprintf("p%d", i), 1).Obj())
			}
		}, "pod_sets", "at most 16"},
		"null pod set":         {func(w *meridianv1.Workload) { w.PodSets = append(w.PodSets, nil) }, "pod_sets[1]", "null"},
		"pod set name missing": {ps(func(p *meridianv1.PodSet) { p.Name = "" }), "pod_sets[0].name", "required"},
		"pod set name bad":     {ps(func(p *meridianv1.PodSet) { p.Name = "-worker" }), "pod_sets[0].name", "DNS-1123"},
		"duplicate pod set names": {func(w *meridianv1.Workload) {
			w.PodSets = append(w.PodSets, makePodSet("worker", 1).Obj())
		}, "pod_sets[1].name", "already used by pod_sets[0]"},
		"zero replicas":          {ps(func(p *meridianv1.PodSet) { p.Replicas = 0 }), "pod_sets[0].replicas", "at least 1"},
		"negative replicas":      {ps(func(p *meridianv1.PodSet) { p.Replicas = -3 }), "pod_sets[0].replicas", "at least 1"},
		"too many replicas":      {ps(func(p *meridianv1.PodSet) { p.Replicas = MaxReplicas + 1 }), "pod_sets[0].replicas", "at most 10000"},
		"negative min_replicas":  {ps(func(p *meridianv1.PodSet) { p.MinReplicas = -1 }), "pod_sets[0].min_replicas", "negative"},
		"min above replicas":     {ps(func(p *meridianv1.PodSet) { p.MinReplicas = 3 }), "pod_sets[0].min_replicas", "must not exceed replicas (3 > 2)"},
		"negative gpu_milli":     {res(func(r *meridianv1.Resources) { r.GpuMilli = -1 }), "pod_sets[0].resources.gpu_milli", "negative"},
		"gpu_milli above 8 gpus": {res(func(r *meridianv1.Resources) { r.GpuMilli = 9000 }), "pod_sets[0].resources.gpu_milli", "at most 8000"},
		"fraction above one gpu": {res(func(r *meridianv1.Resources) { r.GpuMilli = 1500 }), "pod_sets[0].resources.gpu_milli", "multiple of 1000"},
		"gpu memory too big":     {res(func(r *meridianv1.Resources) { r.GpuMemoryMib = MaxGPUMemoryMiB + 1 }), "pod_sets[0].resources.gpu_memory_mib", "at most 1048576"},
		"negative gpu memory":    {res(func(r *meridianv1.Resources) { r.GpuMemoryMib = -5 }), "pod_sets[0].resources.gpu_memory_mib", "negative"},
		"cpu too big":            {res(func(r *meridianv1.Resources) { r.CpuMilli = MaxCPUMilli + 1 }), "pod_sets[0].resources.cpu_milli", "at most 4096000"},
		"negative cpu":           {res(func(r *meridianv1.Resources) { r.CpuMilli = -1 }), "pod_sets[0].resources.cpu_milli", "negative"},
		"memory too big":         {res(func(r *meridianv1.Resources) { r.MemoryMib = MaxMemoryMiB + 1 }), "pod_sets[0].resources.memory_mib", "at most 67108864"},
		"negative memory":        {res(func(r *meridianv1.Resources) { r.MemoryMib = -1 }), "pod_sets[0].resources.memory_mib", "negative"},
		"bad accelerator class":  {res(func(r *meridianv1.Resources) { r.AcceleratorClass = "NVIDIA H100" }), "pod_sets[0].resources.accelerator_class", "not a valid accelerator class"},
		"mode on whole gpu": {res(func(r *meridianv1.Resources) {
			r.GpuMilli = 2000
			r.FractionalMode = meridianv1.FractionalMode_FRACTIONAL_MODE_MIG
		}), "pod_sets[0].resources.fractional_mode", "only applies to a fractional request"},
		"mode on whole gpus with memory": {res(func(r *meridianv1.Resources) {
			r.GpuMilli, r.GpuMemoryMib = 8000, 81920
			r.FractionalMode = meridianv1.FractionalMode_FRACTIONAL_MODE_MPS
		}), "pod_sets[0].resources.fractional_mode", "only applies to a fractional request"},
		"mig profile unknown": {res(func(r *meridianv1.Resources) {
			r.GpuMilli, r.MigProfile = 500, "5g.99zz"
		}), "pod_sets[0].resources.mig_profile", ""},
		"mig profile too small": {res(func(r *meridianv1.Resources) {
			r.GpuMilli, r.MigProfile = 900, "1g.10gb"
		}), "pod_sets[0].resources.gpu_milli", "more than mig_profile"},
		"unknown fractional mode": {res(func(r *meridianv1.Resources) { r.FractionalMode = 42 }), "pod_sets[0].resources.fractional_mode", "unknown value 42"},
		"unknown topology":        {ps(func(p *meridianv1.PodSet) { p.Topology = 99 }), "pod_sets[0].topology", "unknown value 99"},
		"same node too big": {ps(func(p *meridianv1.PodSet) {
			p.Replicas = 9
			p.Resources.GpuMilli = 8000
			p.Topology = meridianv1.Topology_TOPOLOGY_SAME_NODE
		}), "pod_sets[0].topology", "72000"},
		"total replicas over limit": {func(w *meridianv1.Workload) {
			w.PodSets = nil
			for i := 0; i < 11; i++ {
				w.PodSets = append(w.PodSets, makePodSet(fmt.Sprintf("p%d", i), MaxReplicas).Obj())
			}
		}, "pod_sets", "total replicas"},
		"label key bad prefix":   {func(w *meridianv1.Workload) { w.Labels = map[string]string{"Bad_Prefix/x": "v"} }, `labels["Bad_Prefix/x"]`, "prefix"},
		"label key empty":        {func(w *meridianv1.Workload) { w.Labels = map[string]string{"": "v"} }, `labels[""]`, "must not be empty"},
		"label value too long":   {func(w *meridianv1.Workload) { w.Labels = map[string]string{"team": strings.Repeat("v", 64)} }, `labels["team"]`, "at most 63"},
		"label value bad chars":  {func(w *meridianv1.Workload) { w.Labels = map[string]string{"team": "a b"} }, `labels["team"]`, "letters, digits"},
		"selector key too long":  {func(w *meridianv1.Workload) { w.ClusterSelector = map[string]string{strings.Repeat("k", 64): "v"} }, `cluster_selector["` + strings.Repeat("k", 64) + `"]`, "name part"},
		"idempotency key long":   {func(w *meridianv1.Workload) { w.IdempotencyKey = strings.Repeat("k", 129) }, "idempotency_key", "at most 128"},
		"idempotency key binary": {func(w *meridianv1.Workload) { w.IdempotencyKey = "key\n1" }, "idempotency_key", "printable"},
		"runtime too large": {func(w *meridianv1.Workload) {
			w.Runtime.GetContainer().Env = map[string]string{"BLOB": strings.Repeat("x", MaxRuntimeBytes)}
		}, "runtime", "at most 262144 bytes"},
		"too many labels": {func(w *meridianv1.Workload) { w.Labels = manyLabels(MaxLabels+1, "") }, "labels", "at most 64 entries are allowed (got 65)"},
		"too many selector entries": {func(w *meridianv1.Workload) {
			w.ClusterSelector = manyLabels(MaxLabels*10, "")
		}, "cluster_selector", "at most 64 entries are allowed (got 640)"},
		"workload too large": {func(w *meridianv1.Workload) {
			// Each part within its own limit, the whole over MaxWorkloadBytes.
			w.Runtime.GetContainer().Env = map[string]string{"BLOB": strings.Repeat("x", 250*1024)}
			long := strings.Repeat("p", 200) + ".example/"
			w.Labels = manyLabels(MaxLabels, long)
			w.ClusterSelector = manyLabels(MaxLabels, long)
		}, "workload", "the limit is 294912"},
		"container without image": {func(w *meridianv1.Workload) { w.Runtime.GetContainer().Image = "" }, "runtime.container.image", "required"},
		"slurm without script": {func(w *meridianv1.Workload) {
			w.Runtime = &meridianv1.RuntimeTemplate{Kind: &meridianv1.RuntimeTemplate_Slurm{Slurm: &meridianv1.SlurmTemplate{}}}
		}, "runtime.slurm.script", "required"},
		"slurm negative time limit": {func(w *meridianv1.Workload) {
			w.Runtime = &meridianv1.RuntimeTemplate{Kind: &meridianv1.RuntimeTemplate_Slurm{Slurm: &meridianv1.SlurmTemplate{
				Script: "#!/bin/sh\n", TimeLimit: durationpb.New(-1e9)}}}
		}, "runtime.slurm.time_limit", "negative"},
	}
	if len(tests) < 30 {
		t.Fatalf("only %d bad-input cases; the contract asks for at least 30", len(tests))
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			w := makeWorkload("acme/vision").Obj()
			tc.mutate(w)
			err := ValidateWorkload(w)
			if err == nil {
				t.Fatal("ValidateWorkload() = nil, want an InvalidArgument error")
			}
			if got := status.Code(err); got != codes.InvalidArgument {
				t.Fatalf("code = %v, want InvalidArgument", got)
			}
			vs := FieldViolations(err)
			if len(vs) != 1 {
				t.Fatalf("got %d violations, want exactly 1: %v", len(vs), err)
			}
			if vs[0].GetField() != tc.wantField {
				t.Errorf("field = %q, want %q", vs[0].GetField(), tc.wantField)
			}
			if !strings.Contains(vs[0].GetDescription(), tc.wantDesc) {
				t.Errorf("description = %q, want it to contain %q", vs[0].GetDescription(), tc.wantDesc)
			}
			if msg := status.Convert(err).Message(); !strings.Contains(msg, tc.wantField+": ") {
				t.Errorf("message %q does not name field %q", msg, tc.wantField)
			}
		})
	}
}

func TestValidateWorkloadReportsEveryProblemInOrder(t *testing.T) {
	w := makeWorkload("").Mutate(func(w *meridianv1.Workload) {
		w.Id = "wl-x"
		w.PodSets = append(w.PodSets, makePodSet("worker", 0).GPU(1500).Obj())
		w.Labels = map[string]string{"z": "ok", "b!": "x", "a!": "y"}
	}).Obj()
	err := ValidateWorkload(w)
	want := []string{
		"id",
		"queue",
		"pod_sets[1].name",
		"pod_sets[1].replicas",
		"pod_sets[1].resources.gpu_milli",
		`labels["a!"]`,
		`labels["b!"]`,
	}
	vs := FieldViolations(err)
	var got []string
	for _, v := range vs {
		got = append(got, v.GetField())
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("fields = %q, want %q", got, want)
	}
	msg := status.Convert(err).Message()
	if !strings.HasPrefix(msg, fmt.Sprintf("invalid workload: %d problems: ", len(want))) {
		t.Errorf("message = %q, want a count of %d problems", msg, len(want))
	}
}

func TestValidateWorkloadNil(t *testing.T) {
	vs := FieldViolations(ValidateWorkload(nil))
	if len(vs) != 1 || vs[0].GetField() != "workload" {
		t.Fatalf("violations = %v, want one on field workload", vs)
	}
}

func TestFieldViolations(t *testing.T) {
	inner := ValidateWorkload(&meridianv1.Workload{})
	tests := map[string]struct {
		err  error
		want int
	}{
		"nil":              {nil, 0},
		"plain error":      {errors.New("boom"), 0},
		"status no detail": {status.Error(codes.InvalidArgument, "bad"), 0},
		"validation error": {inner, 2}, // queue and pod_sets
		"wrapped":          {fmt.Errorf("submit: %w", inner), 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := len(FieldViolations(tc.err)); got != tc.want {
				t.Fatalf("len(FieldViolations) = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestCheckQueuePath(t *testing.T) {
	tests := map[string]struct {
		path string
		ok   bool
	}{
		"tenant":              {"acme", true},
		"team":                {"acme/vision", true},
		"project":             {"acme/vision/train-2", true},
		"digits":              {"0/1/2", true},
		"63 chars":            {strings.Repeat("a", 63), true},
		"empty":               {"", false},
		"64 chars":            {strings.Repeat("a", 64), false},
		"leading slash":       {"/acme", false},
		"leading dash":        {"acme/-x", false},
		"trailing dash":       {"acme/x-", false},
		"dot":                 {"acme.io", false},
		"underscore":          {"acme_x", false},
		"upper case":          {"Acme", false},
		"four segments":       {"a/b/c/d", false},
		"unicode":             {"acmé", false},
		"space":               {"ac me", false},
		"only slash":          {"/", false},
		"double slash at end": {"a/b//", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := CheckQueuePath(tc.path)
			if (err == nil) != tc.ok {
				t.Fatalf("CheckQueuePath(%q) = %v, want ok=%v", tc.path, err, tc.ok)
			}
		})
	}
}

func TestValidateQueue(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	tests := map[string]struct {
		mutate    func(*meridianv1.Queue)
		wantField string // "" means valid
	}{
		"valid":             {func(*meridianv1.Queue) {}, ""},
		"valid no quotas":   {func(q *meridianv1.Queue) { q.Quotas = nil }, ""},
		"valid zero borrow": {func(q *meridianv1.Queue) { q.Quotas[1].BorrowLimitMilli = i64(0) }, ""},
		"valid revision":    {func(q *meridianv1.Queue) { q.Revision = 7 }, ""},
		"valid every class": {func(q *meridianv1.Queue) { q.Quotas[0].AcceleratorClass = AnyClass }, ""},
		"every class twice": {func(q *meridianv1.Queue) {
			q.Quotas[0].AcceleratorClass, q.Quotas[1].AcceleratorClass = AnyClass, AnyClass
		}, "quotas[1].accelerator_class"},
		"missing path":          {func(q *meridianv1.Queue) { q.Path = "" }, "path"},
		"bad path":              {func(q *meridianv1.Queue) { q.Path = "acme/Team" }, "path"},
		"negative weight":       {func(q *meridianv1.Queue) { q.Weight = -1 }, "weight"},
		"weight too big":        {func(q *meridianv1.Queue) { q.Weight = MaxQueueWeight + 1 }, "weight"},
		"null quota":            {func(q *meridianv1.Queue) { q.Quotas[1] = nil }, "quotas[1]"},
		"quota class missing":   {func(q *meridianv1.Queue) { q.Quotas[0].AcceleratorClass = "" }, "quotas[0].accelerator_class"},
		"quota class bad":       {func(q *meridianv1.Queue) { q.Quotas[0].AcceleratorClass = "H100!" }, "quotas[0].accelerator_class"},
		"quota class duplicate": {func(q *meridianv1.Queue) { q.Quotas[1].AcceleratorClass = "nvidia-h100-80gb" }, "quotas[1].accelerator_class"},
		"negative nominal":      {func(q *meridianv1.Queue) { q.Quotas[1].NominalMilliGpus = -1 }, "quotas[1].nominal_milli_gpus"},
		"huge nominal":          {func(q *meridianv1.Queue) { q.Quotas[1].NominalMilliGpus = MaxQuotaMilli + 1 }, "quotas[1].nominal_milli_gpus"},
		"negative borrow":       {func(q *meridianv1.Queue) { q.Quotas[0].BorrowLimitMilli = i64(-1) }, "quotas[0].borrow_limit_milli"},
		"negative lend":         {func(q *meridianv1.Queue) { q.Quotas[0].LendLimitMilli = i64(-1) }, "quotas[0].lend_limit_milli"},
		"lend above nominal":    {func(q *meridianv1.Queue) { q.Quotas[0].LendLimitMilli = i64(9000) }, "quotas[0].lend_limit_milli"},
		"description too long":  {func(q *meridianv1.Queue) { q.Description = strings.Repeat("d", MaxQueueDescriptionLen+1) }, "description"},
		"status set":            {func(q *meridianv1.Queue) { q.Status = &meridianv1.QueueStatus{} }, "status"},
		"create_time set":       {func(q *meridianv1.Queue) { q.CreateTime = timestamppb.Now() }, "create_time"},
		"update_time set":       {func(q *meridianv1.Queue) { q.UpdateTime = timestamppb.Now() }, "update_time"},
		"negative revision":     {func(q *meridianv1.Queue) { q.Revision = -1 }, "revision"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			q := makeQueue("acme/vision")
			tc.mutate(q)
			err := ValidateQueue(q)
			if tc.wantField == "" {
				if err != nil {
					t.Fatalf("ValidateQueue() = %v, want nil", err)
				}
				return
			}
			vs := FieldViolations(err)
			if status.Code(err) != codes.InvalidArgument || len(vs) != 1 {
				t.Fatalf("ValidateQueue() = %v, want InvalidArgument with one violation", err)
			}
			if vs[0].GetField() != tc.wantField {
				t.Errorf("field = %q, want %q", vs[0].GetField(), tc.wantField)
			}
		})
	}
	if vs := FieldViolations(ValidateQueue(nil)); len(vs) != 1 || vs[0].GetField() != "queue" {
		t.Errorf("ValidateQueue(nil) violations = %v, want one on field queue", vs)
	}
}

// manyLabels returns n valid labels with long keys and values, each key
// starting with prefix.
func manyLabels(n int, prefix string) map[string]string {
	m := make(map[string]string, n)
	for i := 0; i < n; i++ {
		m[fmt.Sprintf("%s%s-%d", prefix, strings.Repeat("k", 50), i)] = strings.Repeat("v", 60)
	}
	return m
}
