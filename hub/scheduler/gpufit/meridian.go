package gpufit

type meridian struct{ tw TargetWorkload }

// Meridian is our fragmentation-aware policy (see
// docs/design/fragmentation-scoring.md). Placeholder: FGD on exact
// (untruncated) fragmentation deltas.
func Meridian(dist TargetWorkload) Scorer { return meridian{dist} }

func (meridian) Name() string { return "meridian" }

func (m meridian) Score(n *Node, r *Request, dst []int) (float64, []int) {
	var buf [maxStackGPUs]int32
	free := freeMilli(n, buf[:0])
	before := m.tw.frag(n.Class, n.CPUMilliFree, free)
	cpuAfter := n.CPUMilliFree - r.CPUMilli
	if !r.Shared() {
		dst = firstFree(n, r, dst)
		for _, i := range dst {
			free[i] -= r.Milli
		}
		return before - m.tw.frag(n.Class, cpuAfter, free), dst
	}
	best, bestScore := -1, 0.0
	for i := range n.GPUs {
		if !gpuFits(&n.GPUs[i], r) {
			continue
		}
		free[i] -= r.Milli
		s := before - m.tw.frag(n.Class, cpuAfter, free)
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
