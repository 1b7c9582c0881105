package validation

import (
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-gpu/meridian/hub/convert"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// AnyClass as a queue quota's accelerator_class sets the limits of every
// class the queue does not list by name.
const AnyClass = "*"

// Limits enforced by ValidateWorkload and ValidateQueue. They are part of
// the API contract (docs/api.md lists them).
const (
	MaxPodSets           = 16
	MaxReplicas          = 10_000
	MaxTotalReplicas     = 100_000
	MaxGPUMilli          = 8_000
	GPUMilliPerGPU       = 1_000
	MaxGPUMemoryMiB      = 1_048_576
	MaxCPUMilli          = 4_096_000
	MaxMemoryMiB         = 64 * 1024 * 1024 // 64 TiB in MiB
	MinPriority          = -1_000_000
	MaxPriority          = 1_000_000
	MaxIdempotencyKeyLen = 128
	MaxRuntimeBytes      = 256 * 1024
	// MaxLabels bounds the entries of `labels` and of `cluster_selector`:
	// labels are copied into every list page, watch event and status
	// write, so their count is part of what one workload costs everyone.
	MaxLabels = 64
	// MaxWorkloadBytes bounds the whole workload as submitted (its
	// protobuf encoding): a full runtime template plus some room for
	// labels and pod sets. It keeps what one workload costs every list
	// page, watch event and status write in check.
	MaxWorkloadBytes       = 288 * 1024
	MaxSameNodeGPUMilli    = 64 * GPUMilliPerGPU // replicas × GPUs on one node
	MaxQueueWeight         = 1_000_000
	MaxQueueDescriptionLen = 1024
	// MaxQuotaMilli bounds quota numbers (one billion GPUs) so that sums
	// over a queue tree cannot overflow int64.
	MaxQuotaMilli = 1_000_000_000_000
)

// ValidateWorkload checks a workload as submitted by a client. It returns
// nil when the workload is valid, and otherwise an InvalidArgument status
// error carrying one field violation per problem (see FieldViolations).
// It never modifies w.
func ValidateWorkload(w *meridianv1.Workload) error {
	var c collector
	if w == nil {
		c.add("workload", "is required")
		return c.err("workload")
	}
	validateWorkload(&c, w)
	return c.err("workload")
}

func validateWorkload(c *collector, w *meridianv1.Workload) {
	// Server-owned fields.
	if w.GetId() != "" {
		c.add("id", "is assigned by the server and must be empty on submit")
	}
	if w.GetName() != "" {
		if p := checkDNSLabel(w.GetName()); p != "" {
			c.add("name", "%s", p)
		}
	}
	if err := CheckQueuePath(w.GetQueue()); err != nil {
		c.add("queue", "%s", err.Error())
	}
	if p := w.GetPriority(); p < MinPriority || p > MaxPriority {
		c.add("priority", "must be between %d and %d (got %d)", MinPriority, MaxPriority, p)
	}
	validateLabels(c, "cluster_selector", w.GetClusterSelector())
	validatePodSets(c, w.GetPodSets())
	validateRuntime(c, w.GetRuntime())
	validateMaxRuntime(c, w)
	validateLabels(c, "labels", w.GetLabels())
	if k := w.GetIdempotencyKey(); k != "" {
		if len(k) > MaxIdempotencyKeyLen {
			c.add("idempotency_key", "must be at most %d characters (got %d)", MaxIdempotencyKeyLen, len(k))
		} else if !isPrintableASCII(k) {
			c.add("idempotency_key", "must contain only printable ASCII characters")
		}
	}
	if !UnsetTime(w.GetCreateTime()) {
		c.add("create_time", "is set by the server and must be empty on submit")
	}
	if w.GetStatus() != nil {
		c.add("status", "is set by the server and must be empty on submit")
	}
	if w.GetSubmittedBy() != "" {
		c.add("submitted_by", "is set by the server and must be empty on submit")
	}
	if w.GetTraceParent() != "" {
		c.add("trace_parent", "is set by the server and must be empty on submit; send a W3C traceparent header to continue your own trace")
	}
	if n := proto.Size(w); n > MaxWorkloadBytes {
		c.add("workload", "is %d bytes encoded; the limit is %d (%d KiB): shrink labels or the runtime template", n, MaxWorkloadBytes, MaxWorkloadBytes/1024)
	}
}

func validateLabels(c *collector, field string, m map[string]string) {
	if len(m) > MaxLabels {
		// One violation, not one per entry: thousands of entries would
		// make the error itself a flood.
		c.add(field, "at most %d entries are allowed (got %d)", MaxLabels, len(m))
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if p := checkLabelKey(k); p != "" {
			c.add(key(field, k), "%s", p)
			continue
		}
		if p := checkLabelValue(m[k]); p != "" {
			c.add(key(field, k), "%s", p)
		}
	}
}

func validatePodSets(c *collector, sets []*meridianv1.PodSet) {
	if len(sets) == 0 {
		c.add("pod_sets", "at least one pod set is required")
		return
	}
	if len(sets) > MaxPodSets {
		c.add("pod_sets", "at most %d pod sets are allowed (got %d)", MaxPodSets, len(sets))
	}
	seen := make(map[string]int, len(sets))
	var total int64
	for i, ps := range sets {
		path := index("pod_sets", i)
		if ps == nil {
			c.add(path, "must not be null")
			continue
		}
		switch name := ps.GetName(); {
		case name == "":
			c.add(join(path, "name"), "is required")
		case checkDNSLabel(name) != "":
			c.add(join(path, "name"), "%s", checkDNSLabel(name))
		default:
			if j, dup := seen[name]; dup {
				c.add(join(path, "name"), "%q is already used by pod_sets[%d]; pod set names must be unique", name, j)
			} else {
				seen[name] = i
			}
		}
		r := ps.GetReplicas()
		switch {
		case r < 1:
			c.add(join(path, "replicas"), "must be at least 1 (got %d)", r)
		case r > MaxReplicas:
			c.add(join(path, "replicas"), "must be at most %d (got %d)", MaxReplicas, r)
		}
		if r > 0 {
			total += int64(r)
		}
		switch m := ps.GetMinReplicas(); {
		case m < 0:
			c.add(join(path, "min_replicas"), "must not be negative (got %d)", m)
		case m > r && r >= 1:
			c.add(join(path, "min_replicas"), "must not exceed replicas (%d > %d)", m, r)
		}
		validateResources(c, join(path, "resources"), ps.GetResources())
		validateTopology(c, path, ps)
	}
	if total > MaxTotalReplicas {
		c.add("pod_sets", "total replicas across pod sets must be at most %d (got %d)", MaxTotalReplicas, total)
	}
}

func validateResources(c *collector, path string, r *meridianv1.Resources) {
	if r == nil {
		return
	}
	if r.GetMigProfile() != "" {
		// The same check the hub's conversion makes, at submit, so that a
		// bad profile is refused rather than left pending as Invalid.
		if _, err := convert.MIGRequest(r); err != nil {
			field, msg, ok := strings.Cut(err.Error(), ": ")
			if !ok {
				field, msg = "mig_profile", err.Error()
			}
			c.add(join(path, field), "%s", msg)
		}
	}
	g := r.GetGpuMilli()
	switch {
	case g < 0:
		c.add(join(path, "gpu_milli"), "must not be negative (got %d)", g)
	case g > MaxGPUMilli:
		c.add(join(path, "gpu_milli"), "must be at most %d (8 GPUs; got %d)", MaxGPUMilli, g)
	case g > GPUMilliPerGPU && g%GPUMilliPerGPU != 0:
		c.add(join(path, "gpu_milli"), "above %d must be a multiple of %d (whole GPUs); fractions are only allowed for a single GPU (got %d)", GPUMilliPerGPU, GPUMilliPerGPU, g)
	}
	checkRange(c, join(path, "gpu_memory_mib"), int64(r.GetGpuMemoryMib()), MaxGPUMemoryMiB)
	checkRange(c, join(path, "cpu_milli"), int64(r.GetCpuMilli()), MaxCPUMilli)
	checkRange(c, join(path, "memory_mib"), int64(r.GetMemoryMib()), MaxMemoryMiB)
	if ac := r.GetAcceleratorClass(); ac != "" {
		if p := checkAcceleratorClass(ac); p != "" {
			c.add(join(path, "accelerator_class"), "%s", p)
		}
	}
	mode := r.GetFractionalMode()
	if _, known := meridianv1.FractionalMode_name[int32(mode)]; !known {
		c.add(join(path, "fractional_mode"), "unknown value %d", int32(mode))
	} else if mode != meridianv1.FractionalMode_FRACTIONAL_MODE_UNSPECIFIED &&
		mode != meridianv1.FractionalMode_FRACTIONAL_MODE_ANY {
		fractional := (g > 0 && g < GPUMilliPerGPU) || (g == 0 && r.GetGpuMemoryMib() > 0)
		if !fractional {
			c.add(join(path, "fractional_mode"), "%s only applies to a fractional request (gpu_milli between 1 and 999, or gpu_memory_mib set); got gpu_milli %d", mode, g)
		}
	}
}

func checkRange(c *collector, field string, v, max int64) {
	switch {
	case v < 0:
		c.add(field, "must not be negative (got %d)", v)
	case v > max:
		c.add(field, "must be at most %d (got %d)", max, v)
	}
}

func validateTopology(c *collector, path string, ps *meridianv1.PodSet) {
	t := ps.GetTopology()
	if _, known := meridianv1.Topology_name[int32(t)]; !known {
		c.add(join(path, "topology"), "unknown value %d", int32(t))
		return
	}
	if t != meridianv1.Topology_TOPOLOGY_SAME_NODE {
		return
	}
	g := int64(ps.GetResources().GetGpuMilli())
	r := int64(ps.GetReplicas())
	if g > 0 && r > 0 && g*r > MaxSameNodeGPUMilli {
		c.add(join(path, "topology"), "TOPOLOGY_SAME_NODE needs %d replicas × %d gpu_milli = %d on one node; no node has more than %d (64 GPUs)", r, g, g*r, MaxSameNodeGPUMilli)
	}
}

func validateRuntime(c *collector, rt *meridianv1.RuntimeTemplate) {
	if rt == nil {
		return
	}
	if n := proto.Size(rt); n > MaxRuntimeBytes {
		c.add("runtime", "must be at most %d bytes serialized (got %d)", MaxRuntimeBytes, n)
	}
	switch k := rt.GetKind().(type) {
	case *meridianv1.RuntimeTemplate_Container:
		if k.Container.GetImage() == "" {
			c.add("runtime.container.image", "is required for a container template")
		}
	case *meridianv1.RuntimeTemplate_Slurm:
		if k.Slurm.GetScript() == "" {
			c.add("runtime.slurm.script", "is required for a Slurm template")
		}
		if tl := k.Slurm.GetTimeLimit(); tl != nil {
			if err := tl.CheckValid(); err != nil {
				c.add("runtime.slurm.time_limit", "%v", err)
			} else if tl.AsDuration() < 0 {
				c.add("runtime.slurm.time_limit", "must not be negative (got %s)", tl.AsDuration())
			}
		}
	}
}

// ValidateQueue checks a queue as sent to CreateQueue or UpdateQueue. It
// returns nil when the queue is valid, and otherwise an InvalidArgument
// status error carrying one field violation per problem. Output-only
// fields (status, create_time, update_time) must be empty; `revision` may
// be set for an optimistic update. It never modifies q.
func ValidateQueue(q *meridianv1.Queue) error {
	var c collector
	if q == nil {
		c.add("queue", "is required")
		return c.err("queue")
	}
	if err := CheckQueuePath(q.GetPath()); err != nil {
		c.add("path", "%s", err.Error())
	}
	if w := q.GetWeight(); w < 0 || w > MaxQueueWeight {
		c.add("weight", "must be between 0 and %d (got %d); 0 means the default weight 1", MaxQueueWeight, w)
	}
	seen := make(map[string]int)
	for i, qq := range q.GetQuotas() {
		path := index("quotas", i)
		if qq == nil {
			c.add(path, "must not be null")
			continue
		}
		switch ac := qq.GetAcceleratorClass(); {
		case ac == "":
			c.add(join(path, "accelerator_class"), "is required (a class, or \"*\" for every class the queue does not list)")
		case ac != AnyClass && checkAcceleratorClass(ac) != "":
			c.add(join(path, "accelerator_class"), "%s", checkAcceleratorClass(ac))
		default:
			if j, dup := seen[ac]; dup {
				c.add(join(path, "accelerator_class"), "%q already has a quota in quotas[%d]; one entry per class", ac, j)
			} else {
				seen[ac] = i
			}
		}
		nominal := qq.GetNominalMilliGpus()
		checkRange(&c, join(path, "nominal_milli_gpus"), nominal, MaxQuotaMilli)
		if qq.BorrowLimitMilli != nil {
			checkRange(&c, join(path, "borrow_limit_milli"), qq.GetBorrowLimitMilli(), MaxQuotaMilli)
		}
		if qq.LendLimitMilli != nil {
			switch l := qq.GetLendLimitMilli(); {
			case l < 0:
				c.add(join(path, "lend_limit_milli"), "must not be negative (got %d)", l)
			case l > nominal && nominal >= 0:
				c.add(join(path, "lend_limit_milli"), "must not exceed nominal_milli_gpus (%d > %d)", l, nominal)
			}
		}
	}
	if d := q.GetDescription(); len(d) > MaxQueueDescriptionLen {
		c.add("description", "must be at most %d bytes (got %d)", MaxQueueDescriptionLen, len(d))
	}
	if q.GetStatus() != nil {
		c.add("status", "is set by the server and must be empty")
	}
	if !UnsetTime(q.GetCreateTime()) {
		c.add("create_time", "is set by the server and must be empty")
	}
	if !UnsetTime(q.GetUpdateTime()) {
		c.add("update_time", "is set by the server and must be empty")
	}
	if r := q.GetRevision(); r < 0 {
		c.add("revision", "must not be negative (got %d)", r)
	}
	return c.err("queue")
}
