package gpufit

import "math"

type fgd struct{ tw TargetWorkload }

// FGD is Fragmentation Gradient Descent as the reference simulator's
// FGDScore plugin implements it: the node score is
//
//	trunc(100 * sigmoid((frag_before - frag_after) / 1000))
//
// an integer in [0,100) where 50 means "no change in fragmentation". A
// fractional request tries every GPU with enough free share and keeps the one
// with the highest (integer) score, the lowest index on ties; whole-GPU
// requests take the lowest-indexed idle GPUs. Ties between nodes are left to
// the caller (the reference breaks them uniformly at random).
func FGD(dist TargetWorkload) Scorer { return fgd{dist} }

func (fgd) Name() string { return "fgd" }

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

func fgdScore(before, after float64) float64 {
	return float64(int64(sigmoid((before-after)/1000) * 100))
}

func (f fgd) Score(n *Node, r *Request, dst []int) (float64, []int) {
	var buf [maxStackGPUs]int32
	free := freeMilli(n, buf[:0])
	before := f.tw.frag(n.Class, n.CPUMilliFree, free)
	cpuAfter := n.CPUMilliFree - r.CPUMilli
	if !r.Shared() {
		dst = firstFree(n, r, dst)
		for _, i := range dst {
			free[i] -= r.Milli
		}
		return fgdScore(before, f.tw.frag(n.Class, cpuAfter, free)), dst
	}
	best, bestScore := -1, 0.0
	for i := range n.GPUs {
		if !gpuFits(n, i, r) {
			continue
		}
		free[i] -= r.Milli
		s := fgdScore(before, f.tw.frag(n.Class, cpuAfter, free))
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
