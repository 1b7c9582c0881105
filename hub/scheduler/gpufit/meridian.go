package gpufit

// MeridianOptions tunes the Meridian scorer. The zero value disables every
// refinement (plain FGD on the given workload); DefaultMeridianOptions is
// what Meridian uses.
type MeridianOptions struct {
	// MemoryAware adds host memory to the hostability test of fragmentation:
	// a shape counts as hostable on a node only if the node also has the
	// shape's MemMiB free. FGD checks GPU and CPU only.
	MemoryAware bool
	// ClassPressure (lambda >= 0) discounts placing a pod on a node whose
	// accelerator class is wanted by class-constrained shapes of the
	// workload, by lambda * pressure(class) * the pod's GPU milli, so that
	// unconstrained pods leave scarce models to the pods that need them.
	ClassPressure float64
	// SteerCPUOnly breaks ties for CPU-only pods towards nodes with the least
	// free GPU share: CPU on a node whose GPUs are used up is worth nothing to
	// GPU pods, CPU next to idle GPUs is.
	SteerCPUOnly bool
}

// DefaultMeridianOptions are the settings Meridian uses, chosen on the OpenB
// replay (docs/design/fragmentation-scoring.md).
func DefaultMeridianOptions() MeridianOptions {
	return MeridianOptions{MemoryAware: true, ClassPressure: 0.1, SteerCPUOnly: true}
}

type meridian struct {
	tw   TargetWorkload
	opts MeridianOptions
}

// Meridian is our fragmentation-aware policy: FGD's fragmentation gradient
// with DefaultMeridianOptions. Build dist as FGD's target, the most popular
// shapes covering 95% of the mix (TypicalShapes), with their host memory:
// weighing every rare shape as well put Meridian below FGD on mixes it was
// not tuned on (docs/design/fragmentation-scoring.md).
func Meridian(dist TargetWorkload) Scorer { return MeridianWith(dist, DefaultMeridianOptions()) }

// MeridianWith is Meridian with explicit options.
func MeridianWith(dist TargetWorkload, opts MeridianOptions) Scorer {
	if opts.ClassPressure < 0 {
		opts.ClassPressure = 0
	}
	return meridian{tw: dist, opts: opts}
}

func (meridian) Name() string { return "meridian" }

// tieWeight keeps the tie-breaking term strictly inside one score level.
const tieWeight = 0.999

// Score is FGD's integer level trunc(100*sigmoid(delta/1000)) of the
// (memory-aware, class-pressure adjusted) fragmentation decrease, plus a
// tie-breaking term in [0,1) for CPU-only pods. Within a level, the caller's
// stable node order decides, which consolidates load the way the reference
// scheduler's name order does.
func (m meridian) Score(n *Node, r *Request, dst []int) (float64, []int) {
	var buf [maxStackGPUs]int32
	free := freeMilli(n, buf[:0])
	memBefore, memAfter := int64(-1), int64(-1)
	if m.opts.MemoryAware {
		memBefore, memAfter = n.MemMiBFree, n.MemMiBFree-r.MemMiB
	}
	cpuAfter := n.CPUMilliFree - r.CPUMilli
	before := m.tw.fragMem(n.Class, n.CPUMilliFree, memBefore, free)
	if m.opts.ClassPressure > 0 && m.tw.pressure != nil {
		before -= m.opts.ClassPressure * m.tw.pressure[n.Class] * float64(r.TotalMilli())
	}
	if !r.Shared() {
		dst = firstFree(n, r, dst)
		for _, i := range dst {
			free[i] -= r.Milli
		}
		s := fgdScore(before, m.tw.fragMem(n.Class, cpuAfter, memAfter, free))
		if m.opts.SteerCPUOnly && r.GPUs == 0 {
			var left int64
			for _, f := range free {
				left += int64(f)
			}
			s += tieWeight * MilliPerGPU / float64(MilliPerGPU+left)
		}
		return s, dst
	}
	best, bestScore := -1, 0.0
	for i := range n.GPUs {
		if !gpuFits(n, i, r) {
			continue
		}
		free[i] -= r.Milli
		s := fgdScore(before, m.tw.fragMem(n.Class, cpuAfter, memAfter, free))
		free[i] += r.Milli
		if best < 0 || s > bestScore {
			best, bestScore = i, s
		}
	}
	dst = dst[:0]
	if best >= 0 {
		dst = append(dst, best)
	}
	return bestScore, dst
}
