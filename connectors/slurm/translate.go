package slurm

import (
	"fmt"
	"maps"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	"google.golang.org/protobuf/types/known/structpb"
)

type (
	structpbString = structpb.Value_StringValue
	structpbBool   = structpb.Value_BoolValue
)

// Keys of RuntimeTemplate.extra the connector reads. Everything else in
// extra is ignored.
const (
	// ExtraPartition overrides the connector's partition (string).
	ExtraPartition = "partition"
	// ExtraConstraint is a Slurm --constraint expression (string).
	ExtraConstraint = "constraint"
	// ExtraAccount and ExtraQOS are passed as --account and --qos.
	ExtraAccount = "account"
	ExtraQOS     = "qos"
	// ExtraPinNodes (bool) turns the hub's placement hint into a hard
	// --nodelist. Without it the hint is ignored and Slurm places the job.
	ExtraPinNodes = "pin_nodes"
)

// CommentPrefix starts the comment of every job the connector submits.
// Jobs without it are never touched.
const CommentPrefix = "meridian:v1"

// Comment is the job comment that ties a Slurm job to its dispatch.
func Comment(clusterID, dispatchID, workloadID string) string {
	s := CommentPrefix + " dispatch=" + dispatchID + " workload=" + workloadID
	if clusterID != "" {
		s += " cluster=" + clusterID
	}
	return s
}

// JobTag is what a job comment says about its dispatch.
type JobTag struct {
	ClusterID, DispatchID, WorkloadID string
}

// ParseComment reads a comment written by Comment; ok is false for jobs
// the connector did not submit.
func ParseComment(s string) (JobTag, bool) {
	rest, ok := strings.CutPrefix(s, CommentPrefix+" ")
	if !ok {
		return JobTag{}, false
	}
	var t JobTag
	for _, f := range strings.Fields(rest) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "dispatch":
			t.DispatchID = v
		case "workload":
			t.WorkloadID = v
		case "cluster":
			t.ClusterID = v
		}
	}
	return t, t.DispatchID != ""
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

// shape is what translate needs to know about the cluster.
type shape struct {
	partition      string
	workdir        string
	clusterID      string
	gpusPerNode    int               // most GPUs on one node of the class; 0 if unknown
	mpsPerGPU      int64             // MPS units per GPU (100 when configured as 100 per GPU)
	shardsPerGPU   int64             // shards per GPU
	gresTypeOf     map[string]string // accelerator class -> gres type
	hasMPS         bool
	hasShard       bool
	canSwitches    bool // the submit path can carry --switches/--nodelist
	defaultPath    string
	defaultMemMiB  int64
	switchesForTop bool
}

// plan is a dispatch turned into a Slurm job.
type plan struct {
	req      SubmitRequest
	gpuMilli int64 // GPU milli the whole job holds, for usage accounting
}

// translate turns a dispatch into one batch job. Its errors are reasons to
// reject the dispatch (they name the field).
//
// Rules (docs/slurm.md has the full table):
//   - one pod set per job (multi-pod-set gangs are rejected for now);
//   - whole GPUs: K replicas per node, where K divides replicas and K*G fits
//     on one node (largest such K), or the per-node count of the placement
//     hint when it is uniform; --nodes=replicas/K, --ntasks-per-node=K,
//     --gres=gpu[:type]:K*G;
//   - fractional (gpu_milli < 1000): one replica per node, --gres=mps:P
//     with P = ceil(milli*mpsPerGPU/1000) for mode MPS/ANY/UNSPECIFIED, or
//     --gres=shard:N with N = ceil(milli*shardsPerGPU/1000) for
//     SHARD/TIME_SLICE; MIG and MEMORY are rejected;
//   - topology RACK or NVLINK_DOMAIN: --switches=1; SAME_NODE: --nodes=1;
//   - hint: --nodelist only when extra.pin_nodes is true.
func translate(d *agentv1.Dispatch, sh shape) (plan, error) {
	var p plan
	if d == nil {
		return p, fmt.Errorf("dispatch: nil")
	}
	if !idPattern.MatchString(d.GetDispatchId()) {
		return p, fmt.Errorf("dispatch_id %q: must be 1-128 characters of letters, digits, '.', '_', ':' or '-'", d.GetDispatchId())
	}
	wl := d.GetWorkload()
	if wl == nil {
		return p, fmt.Errorf("workload: missing from the dispatch")
	}
	wid := d.GetWorkloadId()
	if wid == "" {
		wid = wl.GetId()
	}
	if wid != "" && !idPattern.MatchString(wid) {
		return p, fmt.Errorf("workload_id %q: must be 1-128 characters of letters, digits, '.', '_', ':' or '-'", wid)
	}
	st := wl.GetRuntime().GetSlurm()
	if st == nil {
		return p, fmt.Errorf("workload.runtime.slurm: missing; a Slurm cluster runs only workloads with a Slurm runtime template")
	}
	if !strings.HasPrefix(st.GetScript(), "#!") {
		return p, fmt.Errorf("workload.runtime.slurm.script: must start with a shebang line such as #!/bin/bash")
	}
	pss := wl.GetPodSets()
	if len(pss) != 1 {
		return p, fmt.Errorf("workload.pod_sets: %d pod sets; the Slurm connector runs one pod set per job (heterogeneous jobs are not supported yet)", len(pss))
	}
	ps := pss[0]
	r := ps.GetResources()
	replicas := int(ps.GetReplicas())
	if replicas < 1 {
		return p, fmt.Errorf("workload.pod_sets[0].replicas: %d, must be at least 1", replicas)
	}
	// An elastic pod set runs at the size the hub admitted and charged.
	size, err := d.PodSetSize(0)
	if err != nil {
		return p, err
	}
	replicas = int(size)
	extra := wl.GetRuntime().GetExtra().GetFields()
	str := func(k string) (string, error) {
		v, ok := extra[k]
		if !ok {
			return "", nil
		}
		s, ok := v.GetKind().(*structpbString)
		if !ok {
			return "", fmt.Errorf("workload.runtime.extra.%s: must be a string", k)
		}
		if strings.ContainsAny(s.StringValue, "\n\r\x00") {
			return "", fmt.Errorf("workload.runtime.extra.%s: contains a control character", k)
		}
		return s.StringValue, nil
	}
	req := SubmitRequest{
		Script:  st.GetScript(),
		Name:    "meridian-" + d.GetDispatchId(),
		Comment: Comment(sh.clusterID, d.GetDispatchId(), wid),
		Workdir: st.GetWorkdir(),
		Env:     maps.Clone(st.GetEnv()),
	}
	if len(req.Name) > 200 {
		req.Name = req.Name[:200]
	}
	if req.Partition, err = str(ExtraPartition); err != nil {
		return p, err
	}
	if req.Partition == "" {
		req.Partition = sh.partition
	}
	if req.Constraints, err = str(ExtraConstraint); err != nil {
		return p, err
	}
	if req.Account, err = str(ExtraAccount); err != nil {
		return p, err
	}
	if req.QOS, err = str(ExtraQOS); err != nil {
		return p, err
	}
	pin := false
	if v, ok := extra[ExtraPinNodes]; ok {
		b, ok := v.GetKind().(*structpbBool)
		if !ok {
			return p, fmt.Errorf("workload.runtime.extra.%s: must be a boolean", ExtraPinNodes)
		}
		pin = b.BoolValue
	}
	if req.Workdir == "" {
		req.Workdir = sh.workdir
	}
	if req.Workdir == "" || !strings.HasPrefix(req.Workdir, "/") {
		return p, fmt.Errorf("workload.runtime.slurm.workdir: %q, must be an absolute path", req.Workdir)
	}
	if req.Env == nil {
		req.Env = map[string]string{}
	}
	for k := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return p, fmt.Errorf("workload.runtime.slurm.env: bad variable name %q", k)
		}
	}
	if _, ok := req.Env["PATH"]; !ok {
		req.Env["PATH"] = sh.defaultPath
	}
	req.Env["MERIDIAN_DISPATCH_ID"] = d.GetDispatchId()
	req.Env["MERIDIAN_WORKLOAD_ID"] = wid
	if tl := st.GetTimeLimit(); tl != nil {
		if err := tl.CheckValid(); err != nil || tl.AsDuration() <= 0 {
			return p, fmt.Errorf("workload.runtime.slurm.time_limit: must be a positive duration")
		}
		req.TimeLimit = tl.AsDuration()
		if req.TimeLimit > 365*24*time.Hour {
			return p, fmt.Errorf("workload.runtime.slurm.time_limit: %s is more than a year", req.TimeLimit)
		}
	}
	if req.TimeLimit, err = maxRuntimeLimit(wl, req.TimeLimit); err != nil {
		return p, err
	}

	// CPU and memory per replica.
	if c := r.GetCpuMilli(); c > 0 {
		req.CPUsPerTask = int((c + 999) / 1000)
	}
	memPerReplica := int64(r.GetMemoryMib())

	milli := int64(r.GetGpuMilli())
	gresType := ""
	if cls := r.GetAcceleratorClass(); cls != "" {
		t, ok := sh.gresTypeOf[cls]
		if !ok {
			return p, fmt.Errorf("workload.pod_sets[0].resources.accelerator_class: %q is not offered by this cluster", cls)
		}
		gresType = t
	}
	perNode := 1
	switch {
	case milli >= 1000:
		if milli%1000 != 0 {
			return p, fmt.Errorf("workload.pod_sets[0].resources.gpu_milli: %d, above 1000 it must be a multiple of 1000", milli)
		}
		g := int(milli / 1000)
		perNode = replicasPerNode(replicas, g, sh.gpusPerNode, ps.GetTopology(), hintCounts(d, ps.GetName()))
		if perNode == 0 {
			return p, fmt.Errorf("workload.pod_sets[0]: %d replicas x %d GPUs cannot be laid out on nodes of %d GPUs", replicas, g, sh.gpusPerNode)
		}
		name := "gpu"
		if gresType != "" {
			name += ":" + gresType
		}
		req.Gres = fmt.Sprintf("%s:%d", name, perNode*g)
		p.gpuMilli = milli * int64(replicas)
	case milli > 0 || r.GetGpuMemoryMib() > 0:
		if milli <= 0 {
			return p, fmt.Errorf("workload.pod_sets[0].resources.gpu_milli: a memory-only GPU request is not supported by Slurm GRES; give gpu_milli")
		}
		if ps.GetTopology() == meridianv1.Topology_TOPOLOGY_SAME_NODE && replicas > 1 {
			return p, fmt.Errorf("workload.pod_sets[0].topology: SAME_NODE with %d fractional replicas is not supported (one fractional replica per node)", replicas)
		}
		switch mode := r.GetFractionalMode(); mode {
		case meridianv1.FractionalMode_FRACTIONAL_MODE_MPS, meridianv1.FractionalMode_FRACTIONAL_MODE_ANY, meridianv1.FractionalMode_FRACTIONAL_MODE_UNSPECIFIED:
			if !sh.hasMPS {
				if mode == meridianv1.FractionalMode_FRACTIONAL_MODE_MPS || !sh.hasShard {
					return p, fmt.Errorf("workload.pod_sets[0].resources.fractional_mode: %s, but the cluster offers no mps GRES", mode)
				}
				req.Gres = fmt.Sprintf("shard:%d", ceilDiv(milli*sh.shardsPerGPU, 1000))
				break
			}
			units := ceilDiv(milli*sh.mpsPerGPU, 1000)
			req.Gres = fmt.Sprintf("mps:%d", units)
			if gm := r.GetGpuMemoryMib(); gm > 0 {
				// MPS can cap device memory per client; the limit applies to
				// the job's one visible device (index 0 inside the job).
				req.Env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = fmt.Sprintf("0=%dM", gm)
			}
		case meridianv1.FractionalMode_FRACTIONAL_MODE_SHARD, meridianv1.FractionalMode_FRACTIONAL_MODE_TIME_SLICE:
			if !sh.hasShard {
				return p, fmt.Errorf("workload.pod_sets[0].resources.fractional_mode: %s, but the cluster offers no shard GRES", mode)
			}
			req.Gres = fmt.Sprintf("shard:%d", ceilDiv(milli*sh.shardsPerGPU, 1000))
		default:
			return p, fmt.Errorf("workload.pod_sets[0].resources.fractional_mode: %s is not supported by the Slurm connector (use MPS or SHARD)", mode)
		}
		p.gpuMilli = milli * int64(replicas)
	}
	req.Nodes = replicas / perNode
	req.TasksPerNode = perNode
	if memPerReplica > 0 {
		req.MemoryPerNodeMiB = memPerReplica * int64(perNode)
	}
	switch ps.GetTopology() {
	case meridianv1.Topology_TOPOLOGY_RACK, meridianv1.Topology_TOPOLOGY_NVLINK_DOMAIN:
		if req.Nodes > 1 && sh.switchesForTop {
			req.Switches = 1
		}
	case meridianv1.Topology_TOPOLOGY_SAME_NODE:
		if req.Nodes != 1 {
			return p, fmt.Errorf("workload.pod_sets[0].topology: SAME_NODE, but %d replicas need %d nodes", replicas, req.Nodes)
		}
	}
	if pin {
		nodes := hintNodes(d, ps.GetName())
		if len(nodes) == 0 {
			return p, fmt.Errorf("workload.runtime.extra.%s: true, but the dispatch has no placement hint for pod set %q", ExtraPinNodes, ps.GetName())
		}
		if len(nodes) != req.Nodes {
			return p, fmt.Errorf("workload.runtime.extra.%s: the placement hint names %d nodes, the job needs %d", ExtraPinNodes, len(nodes), req.Nodes)
		}
		req.NodeList = nodes
	}
	if (req.Switches > 0 || len(req.NodeList) > 0) && !sh.canSwitches {
		if len(req.NodeList) > 0 {
			return p, fmt.Errorf("workload.runtime.extra.%s: hard pinning needs sbatch, which this agent cannot run (slurmrestd v0.0.38 has no nodelist field)", ExtraPinNodes)
		}
		// Without sbatch the switch constraint cannot be expressed; the hub
		// has already checked that the gang fits one rack, so submit
		// without it rather than refuse.
		req.Switches = 0
	}
	p.req = req
	return p, nil
}

// replicasPerNode picks K, the replicas per node: the uniform per-node
// count of the hint if there is one and it fits, else the largest divisor
// of replicas with K*g <= gpusPerNode (SAME_NODE forces K = replicas).
// 0 means no layout exists.
func replicasPerNode(replicas, g, gpusPerNode int, top meridianv1.Topology, hint []int) int {
	if gpusPerNode <= 0 {
		gpusPerNode = g // unknown node size: one replica per node
	}
	if top == meridianv1.Topology_TOPOLOGY_SAME_NODE {
		if replicas*g <= gpusPerNode {
			return replicas
		}
		return 0
	}
	if len(hint) > 0 {
		k := hint[0]
		uniform := k > 0
		total := 0
		for _, c := range hint {
			total += c
			if c != k {
				uniform = false
			}
		}
		if uniform && total == replicas && k*g <= gpusPerNode {
			return k
		}
	}
	for k := replicas; k >= 1; k-- {
		if replicas%k == 0 && k*g <= gpusPerNode {
			return k
		}
	}
	return 0
}

// hintNodes returns the distinct nodes of the hint for a pod set, in order.
func hintNodes(d *agentv1.Dispatch, podSet string) []string {
	var out []string
	seen := map[string]bool{}
	for _, h := range d.GetPlacement() {
		if h.GetPodSet() != podSet {
			continue
		}
		for _, n := range h.GetNodes() {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	return out
}

// hintCounts returns replicas per node in the hint, sorted by node name.
func hintCounts(d *agentv1.Dispatch, podSet string) []int {
	counts := map[string]int{}
	for _, h := range d.GetPlacement() {
		if h.GetPodSet() != podSet {
			continue
		}
		for _, n := range h.GetNodes() {
			counts[n]++
		}
	}
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]int, len(names))
	for i, n := range names {
		out[i] = counts[n]
	}
	return out
}

func ceilDiv(a, b int64) int64 {
	if b <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

// gpuMilliOfJob estimates the GPU milli a job holds from its tres_per_node
// ("gres:gpu:h100:8", "gres:mps:50") and node count, for jobs the connector
// did not launch in this process.
func gpuMilliOfJob(j JobInfo, mpsPerGPU, shardsPerGPU int64) int64 {
	nodes := j.NodeCount
	if nodes <= 0 {
		nodes = 1
	}
	var total int64
	for _, part := range strings.Split(j.TresPerNode, ",") {
		part = strings.TrimPrefix(strings.TrimSpace(part), "gres:")
		if part == "" {
			continue
		}
		fields := strings.Split(part, ":")
		n, err := strconv.ParseInt(fields[len(fields)-1], 10, 64)
		if err != nil || n < 0 {
			continue
		}
		switch fields[0] {
		case "gpu":
			total += n * 1000
		case "mps":
			if mpsPerGPU > 0 {
				total += n * 1000 / mpsPerGPU
			}
		case "shard":
			if shardsPerGPU > 0 {
				total += n * 1000 / shardsPerGPU
			}
		}
	}
	return total * nodes
}
