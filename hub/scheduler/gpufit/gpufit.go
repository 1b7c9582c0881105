package gpufit

import (
	"errors"
	"fmt"
)

// MilliPerGPU is one whole GPU in milli-GPU units.
const MilliPerGPU = 1000

// GPU is the free capacity of one GPU device on a node.
type GPU struct {
	FreeMilli   int32 // free share, in [0, MilliPerGPU]
	FreeMemMiB  int32 // free GPU memory
	TotalMemMiB int32 // GPU memory capacity; 0 when the cluster does not report it
	// MIG is 0 for a GPU that is not MIG-partitioned, else k: its layout is
	// Node.MIG[k-1]. A MIG GPU serves only MIG requests (Request.MIG), and
	// a MIG request only a MIG GPU with a free instance of its profile.
	MIG int32
}

// Node is the free capacity of one node.
type Node struct {
	Class        string // accelerator class (GPU model), e.g. "nvidia-h100-80gb" or "G2"
	CPUMilliFree int64
	MemMiBFree   int64
	GPUs         []GPU
	// MIG holds the layouts of the node's MIG GPUs (see GPU.MIG); nil when
	// it has none.
	MIG []MIGGPU
}

// Request is the resource shape of one pod (one replica of a pod set).
type Request struct {
	CPUMilli, MemMiB int64
	GPUs             int32 // number of GPUs requested; 0 = CPU-only
	Milli            int32 // per-GPU share, 1..1000; 1000 = whole GPUs; <1000 only with GPUs == 1
	GPUMemMiB        int32 // per-GPU memory need; 0 = none
	// MIG, when set, asks for one instance of this MIG profile: then
	// GPUs == 1, Milli == MIG.Milli() and GPUMemMiB == 0 (the profile
	// says the memory).
	MIG MIGProfile
}

// TotalMilli is the request's total GPU share in milli-GPU.
func (r *Request) TotalMilli() int64 { return int64(r.GPUs) * int64(r.Milli) }

// Shared reports whether the request asks for a fraction of one GPU.
func (r *Request) Shared() bool { return r.GPUs == 1 && r.Milli < MilliPerGPU }

// ErrInvalidRequest is wrapped by every error that Request.Validate returns.
var ErrInvalidRequest = errors.New("invalid request")

// IsInvalidRequest reports whether err comes from Request.Validate.
func IsInvalidRequest(err error) bool { return errors.Is(err, ErrInvalidRequest) }

// Validate checks the request's invariants and names the offending field.
func (r *Request) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidRequest, field, fmt.Sprintf(format, args...))
	}
	switch {
	case r.CPUMilli < 0:
		return bad("cpu_milli", "must be >= 0, got %d", r.CPUMilli)
	case r.MemMiB < 0:
		return bad("memory_mib", "must be >= 0, got %d", r.MemMiB)
	case r.GPUs < 0:
		return bad("gpus", "must be >= 0, got %d", r.GPUs)
	case r.GPUMemMiB < 0:
		return bad("gpu_mem_mib", "must be >= 0, got %d", r.GPUMemMiB)
	}
	if r.GPUs == 0 {
		if r.Milli != 0 {
			return bad("gpu_milli", "must be 0 when gpus is 0, got %d", r.Milli)
		}
		if r.GPUMemMiB != 0 {
			return bad("gpu_mem_mib", "must be 0 when gpus is 0, got %d", r.GPUMemMiB)
		}
		return nil
	}
	if r.Milli < 1 || r.Milli > MilliPerGPU {
		return bad("gpu_milli", "must be in 1..%d, got %d", MilliPerGPU, r.Milli)
	}
	if r.Milli < MilliPerGPU && r.GPUs != 1 {
		return bad("gpu_milli", "a fractional share (%d) needs gpus == 1, got gpus %d", r.Milli, r.GPUs)
	}
	if !r.MIG.IsZero() {
		switch {
		case r.MIG.Slices > MIGSlicesPerGPU || r.MIG.MemGB == 0:
			return bad("mig_profile", "%q: want 1..%d slices and memory > 0", r.MIG, MIGSlicesPerGPU)
		case r.GPUs != 1:
			return bad("gpus", "a MIG request takes one instance, got gpus %d", r.GPUs)
		case r.Milli != r.MIG.Milli():
			return bad("gpu_milli", "a MIG %s request is %d milli, got %d", r.MIG, r.MIG.Milli(), r.Milli)
		case r.GPUMemMiB != 0:
			return bad("gpu_mem_mib", "must be 0 for a MIG request (the profile gives the memory), got %d", r.GPUMemMiB)
		}
	}
	return nil
}

// gpuFits reports whether GPU i of n can serve one unit of r.
func gpuFits(n *Node, i int, r *Request) bool {
	g := &n.GPUs[i]
	if g.MIG != 0 || !r.MIG.IsZero() {
		return migFits(n, i, r)
	}
	return g.FreeMilli >= r.Milli && g.FreeMemMiB >= r.GPUMemMiB
}

// migFits: a MIG GPU serves only a MIG request, with a free instance of
// its profile and the compute share still free.
func migFits(n *Node, i int, r *Request) bool {
	if r.MIG.IsZero() {
		return false
	}
	m := n.migGPU(i)
	if m == nil {
		return false
	}
	s := m.slot(r.MIG)
	return s != nil && s.Free > 0 && n.GPUs[i].FreeMilli >= r.Milli
}

// Fits reports whether r fits on n: CPU, memory, and r.GPUs distinct GPUs each
// with at least r.Milli milli-GPU and r.GPUMemMiB MiB free. It does not check
// the accelerator class (the caller filters by class). It never allocates.
func Fits(n *Node, r *Request) bool {
	if n.CPUMilliFree < r.CPUMilli || n.MemMiBFree < r.MemMiB {
		return false
	}
	if r.GPUs == 0 {
		return true
	}
	need := r.GPUs
	for i := range n.GPUs {
		if gpuFits(n, i, r) {
			need--
			if need == 0 {
				return true
			}
		}
	}
	return false
}

// FreeMilli is the node's total free GPU share in milli-GPU.
func (n *Node) FreeMilli() int64 {
	var t int64
	for i := range n.GPUs {
		t += int64(n.GPUs[i].FreeMilli)
	}
	return t
}

// Clone returns a deep copy of n.
func (n *Node) Clone() Node {
	c := *n
	c.GPUs = append([]GPU(nil), n.GPUs...)
	c.CloneMIG()
	return c
}

// Apply charges r to n on the GPU indices gpus (as returned by a Scorer).
//
// It panics on programmer error only: len(gpus) != r.GPUs, an index out of
// range or repeated, or a charge that would leave CPU, memory, a GPU's share
// or a GPU's memory below zero. Callers that checked Fits and use a Scorer's
// indices never trigger it. On panic n is left unchanged.
func (n *Node) Apply(r *Request, gpus []int) {
	n.checkIndices(r, gpus)
	if n.CPUMilliFree < r.CPUMilli || n.MemMiBFree < r.MemMiB {
		panic(fmt.Sprintf("gpufit: Apply: CPU/memory overcommit (free %d/%d, want %d/%d)",
			n.CPUMilliFree, n.MemMiBFree, r.CPUMilli, r.MemMiB))
	}
	for _, i := range gpus {
		if !gpuFits(n, i, r) {
			panic(fmt.Sprintf("gpufit: Apply: GPU %d has %d milli / %d MiB free, want %d / %d",
				i, n.GPUs[i].FreeMilli, n.GPUs[i].FreeMemMiB, r.Milli, r.GPUMemMiB))
		}
	}
	n.CPUMilliFree -= r.CPUMilli
	n.MemMiBFree -= r.MemMiB
	for _, i := range gpus {
		n.GPUs[i].FreeMilli -= r.Milli
		n.GPUs[i].FreeMemMiB -= r.GPUMemMiB
		if !r.MIG.IsZero() {
			n.migGPU(i).slot(r.MIG).Free--
		}
	}
}

// Undo releases a charge made by Apply(r, gpus); it is Apply's exact inverse.
//
// It panics on programmer error only: indices that do not match r, or a
// release that would push a GPU above MilliPerGPU or above its TotalMemMiB
// (when that is reported). On panic n is left unchanged.
func (n *Node) Undo(r *Request, gpus []int) {
	n.checkIndices(r, gpus)
	for _, i := range gpus {
		g := &n.GPUs[i]
		if g.FreeMilli+r.Milli > MilliPerGPU || (g.TotalMemMiB > 0 && g.FreeMemMiB+r.GPUMemMiB > g.TotalMemMiB) ||
			(!r.MIG.IsZero() && (n.migGPU(i) == nil || n.migGPU(i).slot(r.MIG) == nil)) {
			panic(fmt.Sprintf("gpufit: Undo: GPU %d would exceed its capacity (free %d milli / %d MiB, releasing %d / %d)",
				i, g.FreeMilli, g.FreeMemMiB, r.Milli, r.GPUMemMiB))
		}
	}
	n.CPUMilliFree += r.CPUMilli
	n.MemMiBFree += r.MemMiB
	for _, i := range gpus {
		n.GPUs[i].FreeMilli += r.Milli
		n.GPUs[i].FreeMemMiB += r.GPUMemMiB
		if !r.MIG.IsZero() {
			n.migGPU(i).slot(r.MIG).Free++
		}
	}
}

func (n *Node) checkIndices(r *Request, gpus []int) {
	if len(gpus) != int(r.GPUs) {
		panic(fmt.Sprintf("gpufit: %d GPU indices for a request of %d GPUs", len(gpus), r.GPUs))
	}
	for k, i := range gpus {
		if i < 0 || i >= len(n.GPUs) {
			panic(fmt.Sprintf("gpufit: GPU index %d out of range [0,%d)", i, len(n.GPUs)))
		}
		for _, j := range gpus[:k] {
			if j == i {
				panic(fmt.Sprintf("gpufit: GPU index %d repeated", i))
			}
		}
	}
}

// Scorer rates placements. Implementations are pure and safe for concurrent
// use; they hold only immutable, precomputed data.
type Scorer interface {
	Name() string
	// Score rates placing r on n, which Fits. Higher is better. It also picks the GPU indices,
	// appending them to dst[:0] and returning them. Must not mutate n. Deterministic.
	Score(n *Node, r *Request, dst []int) (score float64, gpus []int)
}

// Normalizer is implemented by scorers whose reference implementation (a
// Kubernetes score plugin with a NormalizeScore extension) rescales the scores
// of all feasible nodes of one scheduling cycle before the best is chosen.
// Normalize rewrites scores in place; it is monotone (it never reorders two
// nodes), but it may merge near scores into ties. Callers that only need the
// argmax may skip it.
type Normalizer interface {
	Normalize(scores []float64)
}

// firstFree appends to dst[:0] the first r.GPUs GPUs (by index) that can each
// serve one unit of r. For whole-GPU requests this is the simulator's
// AllocateExclusiveGpuId (lowest-indexed idle GPUs).
func firstFree(n *Node, r *Request, dst []int) []int {
	dst = dst[:0]
	for i := range n.GPUs {
		if len(dst) == int(r.GPUs) {
			break
		}
		if gpuFits(n, i, r) {
			dst = append(dst, i)
		}
	}
	return dst
}
