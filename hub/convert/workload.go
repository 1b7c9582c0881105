package convert

import (
	"fmt"
	"sort"
	"strings"

	"github.com/meridian-gpu/meridian/hub/scheduler"
	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// Mode maps an API fractional mode to the scheduler's. Unspecified and ANY
// both mean "whatever the cluster offers".
func Mode(m meridianv1.FractionalMode) (scheduler.FractionalMode, error) {
	switch m {
	case meridianv1.FractionalMode_FRACTIONAL_MODE_UNSPECIFIED, meridianv1.FractionalMode_FRACTIONAL_MODE_ANY:
		return scheduler.FracAny, nil
	case meridianv1.FractionalMode_FRACTIONAL_MODE_MPS:
		return scheduler.FracMPS, nil
	case meridianv1.FractionalMode_FRACTIONAL_MODE_MIG:
		return scheduler.FracMIG, nil
	case meridianv1.FractionalMode_FRACTIONAL_MODE_TIME_SLICE:
		return scheduler.FracTimeSlice, nil
	case meridianv1.FractionalMode_FRACTIONAL_MODE_MEMORY:
		return scheduler.FracMemory, nil
	case meridianv1.FractionalMode_FRACTIONAL_MODE_SHARD:
		return scheduler.FracShard, nil
	}
	return scheduler.FracAny, fmt.Errorf("unknown fractional mode %d", int32(m))
}

// Modes turns a cluster's advertised list of modes into a set. ANY in the
// list means every mode. Unknown values are skipped and reported.
func Modes(ms []meridianv1.FractionalMode) (scheduler.FracModes, []string) {
	var set scheduler.FracModes
	var bad []string
	for i, m := range ms {
		switch m {
		case meridianv1.FractionalMode_FRACTIONAL_MODE_UNSPECIFIED:
			continue
		case meridianv1.FractionalMode_FRACTIONAL_MODE_ANY:
			set |= scheduler.FracModes(scheduler.FracMPS | scheduler.FracMIG | scheduler.FracTimeSlice | scheduler.FracMemory | scheduler.FracShard)
			continue
		}
		sm, err := Mode(m)
		if err != nil {
			bad = append(bad, fmt.Sprintf("fractional_modes[%d]: %v", i, err))
			continue
		}
		set |= scheduler.FracModes(sm)
	}
	return set, bad
}

// ModesList is the inverse of Modes, in a fixed order.
func ModesList(set scheduler.FracModes) []meridianv1.FractionalMode {
	var out []meridianv1.FractionalMode
	for _, p := range []struct {
		s scheduler.FractionalMode
		m meridianv1.FractionalMode
	}{
		{scheduler.FracMPS, meridianv1.FractionalMode_FRACTIONAL_MODE_MPS},
		{scheduler.FracMIG, meridianv1.FractionalMode_FRACTIONAL_MODE_MIG},
		{scheduler.FracTimeSlice, meridianv1.FractionalMode_FRACTIONAL_MODE_TIME_SLICE},
		{scheduler.FracMemory, meridianv1.FractionalMode_FRACTIONAL_MODE_MEMORY},
		{scheduler.FracShard, meridianv1.FractionalMode_FRACTIONAL_MODE_SHARD},
	} {
		if set&scheduler.FracModes(p.s) != 0 {
			out = append(out, p.m)
		}
	}
	return out
}

// Topology maps an API topology to the scheduler's; unspecified means cluster.
func Topology(t meridianv1.Topology) (scheduler.Topology, error) {
	switch t {
	case meridianv1.Topology_TOPOLOGY_UNSPECIFIED, meridianv1.Topology_TOPOLOGY_CLUSTER:
		return scheduler.TopologyCluster, nil
	case meridianv1.Topology_TOPOLOGY_RACK:
		return scheduler.TopologyRack, nil
	case meridianv1.Topology_TOPOLOGY_NVLINK_DOMAIN:
		return scheduler.TopologyNVLink, nil
	case meridianv1.Topology_TOPOLOGY_SAME_NODE:
		return scheduler.TopologySameNode, nil
	}
	return scheduler.TopologyCluster, fmt.Errorf("unknown topology %d", int32(t))
}

// Request turns one replica's API resources into a gpufit request.
// gpu_milli >= 1000 asks for gpu_milli/1000 whole GPUs; 1..999 asks for that
// share of one GPU; 0 with gpu_memory_mib set asks for a memory share of one
// GPU (the smallest compute share, 1 milli); 0 without memory is CPU-only.
func Request(r *meridianv1.Resources) (gpufit.Request, error) {
	var req gpufit.Request
	if r == nil {
		return req, nil
	}
	g, mem := r.GetGpuMilli(), r.GetGpuMemoryMib()
	switch {
	case g < 0:
		return req, fmt.Errorf("gpu_milli: must not be negative, got %d", g)
	case mem < 0:
		return req, fmt.Errorf("gpu_memory_mib: must not be negative, got %d", mem)
	case r.GetCpuMilli() < 0:
		return req, fmt.Errorf("cpu_milli: must not be negative, got %d", r.GetCpuMilli())
	case r.GetMemoryMib() < 0:
		return req, fmt.Errorf("memory_mib: must not be negative, got %d", r.GetMemoryMib())
	case g >= gpufit.MilliPerGPU && g%gpufit.MilliPerGPU != 0:
		return req, fmt.Errorf("gpu_milli: above %d must be a multiple of %d, got %d", gpufit.MilliPerGPU, gpufit.MilliPerGPU, g)
	}
	req.CPUMilli, req.MemMiB, req.GPUMemMiB = int64(r.GetCpuMilli()), int64(r.GetMemoryMib()), mem
	switch {
	case g >= gpufit.MilliPerGPU:
		req.GPUs, req.Milli = g/gpufit.MilliPerGPU, gpufit.MilliPerGPU
	case g > 0:
		req.GPUs, req.Milli = 1, g
	case mem > 0:
		req.GPUs, req.Milli = 1, 1
	}
	if prof := strings.TrimSpace(r.GetMigProfile()); prof != "" {
		p, err := MIGRequest(r)
		if err != nil {
			return gpufit.Request{}, err
		}
		req.GPUs, req.Milli, req.GPUMemMiB, req.MIG = 1, p.Milli(), 0, p
	}
	if err := req.Validate(); err != nil {
		return gpufit.Request{}, err
	}
	return req, nil
}

// MIGRequest checks a request that names a MIG profile and returns the
// profile. The error names the field (mig_profile, fractional_mode,
// gpu_milli or gpu_memory_mib) relative to the resources message, for the
// API's validation to put behind its path. A request without a profile
// returns the zero profile and no error.
func MIGRequest(r *meridianv1.Resources) (gpufit.MIGProfile, error) {
	name := strings.TrimSpace(r.GetMigProfile())
	if name == "" {
		return gpufit.MIGProfile{}, nil
	}
	p, err := gpufit.ParseMIGProfile(name)
	if err != nil {
		return p, fmt.Errorf("mig_profile: %w", err)
	}
	switch m := r.GetFractionalMode(); m {
	case meridianv1.FractionalMode_FRACTIONAL_MODE_UNSPECIFIED, meridianv1.FractionalMode_FRACTIONAL_MODE_ANY, meridianv1.FractionalMode_FRACTIONAL_MODE_MIG:
	default:
		return p, fmt.Errorf("fractional_mode: %s cannot serve mig_profile %s; leave it unset or use FRACTIONAL_MODE_MIG", m, p)
	}
	if g := r.GetGpuMilli(); g < 0 || g > gpufit.MilliPerGPU {
		return p, fmt.Errorf("gpu_milli: a MIG instance is part of one GPU; want 0..%d with mig_profile, got %d", gpufit.MilliPerGPU, g)
	} else if g > p.Milli() {
		return p, fmt.Errorf("gpu_milli: %d is more than mig_profile %s gives (%d of %d compute slices = %d milli)", g, p, p.Slices, gpufit.MIGSlicesPerGPU, p.Milli())
	}
	if mem := int64(r.GetGpuMemoryMib()); mem > p.MemMiB() {
		return p, fmt.Errorf("gpu_memory_mib: %d is more than mig_profile %s gives (%d MiB)", mem, p, p.MemMiB())
	}
	return p, nil
}

// Workload turns a stored workload into the scheduler's view. avoid lists
// clusters the workload must not go to now (rejection backoff, lost
// clusters). Errors name the field.
func Workload(w *meridianv1.Workload, avoid []string) (*scheduler.Workload, error) {
	if w == nil {
		return nil, fmt.Errorf("workload: is nil")
	}
	if w.GetId() == "" {
		return nil, fmt.Errorf("id: is empty")
	}
	if len(w.GetPodSets()) == 0 {
		return nil, fmt.Errorf("pod_sets: workload %s has no pod sets", w.GetId())
	}
	sw := &scheduler.Workload{
		ID:          w.GetId(),
		Queue:       w.GetQueue(),
		Priority:    w.GetPriority(),
		Preemptible: w.GetPreemptible(),
	}
	if ct := w.GetCreateTime(); ct != nil {
		sw.CreatedAt = ct.AsTime()
	}
	if mr := w.GetMaxRuntime(); mr != nil && mr.AsDuration() > 0 {
		sw.MaxRuntime = mr.AsDuration() // validated on submit: positive, at most 30 days
	}
	if len(w.GetClusterSelector()) > 0 {
		sw.ClusterSelector = make(map[string]string, len(w.GetClusterSelector()))
		for k, v := range w.GetClusterSelector() {
			sw.ClusterSelector[k] = v
		}
	}
	if len(avoid) > 0 {
		sw.AvoidClusters = append([]string(nil), avoid...)
		sort.Strings(sw.AvoidClusters)
	}
	sw.PodSets = make([]scheduler.PodSet, 0, len(w.GetPodSets()))
	for i, ps := range w.GetPodSets() {
		// The field's name is made only for an error: the hub converts
		// every stored workload at each of its changes.
		field := podSetField(i)
		if ps == nil {
			return nil, fmt.Errorf("%s: is nil", field)
		}
		if ps.GetReplicas() <= 0 {
			return nil, fmt.Errorf("%s.replicas: must be positive, got %d", field, ps.GetReplicas())
		}
		if ps.GetMinReplicas() < 0 || ps.GetMinReplicas() > ps.GetReplicas() {
			return nil, fmt.Errorf("%s.min_replicas: must be in 0..replicas (%d), got %d", field, ps.GetReplicas(), ps.GetMinReplicas())
		}
		req, err := Request(ps.GetResources())
		if err != nil {
			return nil, fmt.Errorf("%s.resources.%w", field, err)
		}
		mode, err := Mode(ps.GetResources().GetFractionalMode())
		if err != nil {
			return nil, fmt.Errorf("%s.resources.fractional_mode: %w", field, err)
		}
		if !req.MIG.IsZero() {
			mode = scheduler.FracMIG
		}
		topo, err := Topology(ps.GetTopology())
		if err != nil {
			return nil, fmt.Errorf("%s.topology: %w", field, err)
		}
		name := ps.GetName()
		if name == "" {
			name = fmt.Sprintf("podset-%d", i)
		}
		sw.PodSets = append(sw.PodSets, scheduler.PodSet{
			Name:        name,
			Replicas:    ps.GetReplicas(),
			MinReplicas: ps.GetMinReplicas(),
			Class:       strings.TrimSpace(ps.GetResources().GetAcceleratorClass()),
			Req:         req,
			Mode:        mode,
			Topology:    topo,
		})
	}
	return sw, nil
}

// podSetField formats the name of pod set i for an error message.
type podSetField int

func (i podSetField) String() string { return fmt.Sprintf("pod_sets[%d]", int(i)) }

// PodSetName is the name the scheduler uses for pod set i of w (the API
// name, or podset-<i> when it is empty).
func PodSetName(w *meridianv1.Workload, i int) string {
	if i < 0 || i >= len(w.GetPodSets()) {
		return ""
	}
	if n := w.GetPodSets()[i].GetName(); n != "" {
		return n
	}
	return fmt.Sprintf("podset-%d", i)
}
