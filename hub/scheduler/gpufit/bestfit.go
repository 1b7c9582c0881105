package gpufit

// Normalisation constants of the reference BestFit plugin (the largest node
// spec in the trace): 128 cores and 8 GPUs.
const (
	bestFitMaxCPUMilli = 128000
	bestFitMaxGPUMilli = 8000
)

type bestFit struct{}

// BestFit is the paper's BestFit baseline exactly as the public simulator
// implements it. The node score is
//
//	trunc(100 * (1 - 0.5*(cpuFree-cpuReq)/128000 - 0.5*(gpuFree-gpuReq)/8000))
//
// (integer, higher is tighter), where gpuFree is the node's total free
// milli-GPU. A fractional request takes the feasible GPU with the least free
// share (the lowest index on a tie); whole-GPU requests take the
// lowest-indexed GPUs that fit. BestFit also implements Normalizer with the
// simulator's integer min-max rescaling to [0,100].
func BestFit() Scorer { return bestFit{} }

func (bestFit) Name() string { return "bestfit" }

func (bestFit) Score(n *Node, r *Request, dst []int) (float64, []int) {
	cpu := float64(n.CPUMilliFree-r.CPUMilli) / bestFitMaxCPUMilli * 0.5
	gpu := float64(n.FreeMilli()-r.TotalMilli()) / bestFitMaxGPUMilli * 0.5
	score := float64(int64((1.0 - (cpu + gpu)) * 100))
	return score, tightestGPUs(n, r, dst)
}

// tightestGPUs picks, for a fractional request, the feasible GPU with the
// least free share (lowest index on ties); otherwise the lowest-indexed GPUs
// that fit.
func tightestGPUs(n *Node, r *Request, dst []int) []int {
	if !r.Shared() {
		return firstFree(n, r, dst)
	}
	best := -1
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if gpuFits(n, i, r) && (best < 0 || g.FreeMilli < n.GPUs[best].FreeMilli) {
			best = i
		}
	}
	dst = dst[:0]
	if best >= 0 {
		dst = append(dst, best)
	}
	return dst
}

// Normalize rescales scores to [0,100] with integer arithmetic, like the
// Kubernetes scheduler framework's min-max NormalizeScore used by the
// reference plugin: all scores become 0 when they are all equal.
func (bestFit) Normalize(scores []float64) { minMaxNormalize(scores) }

func minMaxNormalize(scores []float64) {
	if len(scores) == 0 {
		return
	}
	lo, hi := int64(scores[0]), int64(scores[0])
	for _, s := range scores {
		v := int64(s)
		lo = min(lo, v)
		hi = max(hi, v)
	}
	for i, s := range scores {
		if hi == lo {
			scores[i] = 0
			continue
		}
		scores[i] = float64((int64(s) - lo) * 100 / (hi - lo))
	}
}
