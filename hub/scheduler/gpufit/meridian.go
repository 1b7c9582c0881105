package gpufit

import "math"

// MeridianExperiment is scratch (not committed).
var MeridianExperiment struct {
	Quantum  float64
	Pack     int
	GPUExact bool
	PackW    float64
	GW       float64
	CPUW     float64
	Lambda   float64
}

type meridian struct{ tw TargetWorkload }

// Meridian is our fragmentation-aware policy (see
// docs/design/fragmentation-scoring.md).
func Meridian(dist TargetWorkload) Scorer {
	sh := dist.Shapes()
	for i := range sh {
		if sh[i].GPUs > 0 {
			sh[i].Weight *= 1 + MeridianExperiment.GW*float64(int64(sh[i].GPUs)*int64(sh[i].Milli))/1000
		} else {
			sh[i].Weight *= MeridianExperiment.CPUW
		}
	}
	return meridian{NewTargetWorkload(sh)}
}

func (meridian) Name() string { return "meridian" }

func (m meridian) level(d float64) float64 {
	q := MeridianExperiment.Quantum
	if q == 0 {
		return float64(int64(sigmoid(d/1000) * 100))
	}
	if q < 0 {
		return float64(int64(sigmoid(d/(-q)) * 100))
	}
	return math.Floor(d / q)
}

func (m meridian) pack(n *Node, r *Request, free []int32, cpuAfter int64) float64 {
	var tot int64
	for _, f := range free {
		tot += int64(f)
	}
	switch MeridianExperiment.Pack {
	case 1:
		return 1 - float64(tot)/16000.0
	case 2:
		if len(free) == 0 {
			return 0
		}
		return 1 - float64(tot)/float64(len(free)*1000)
	case 3:
		full := 0
		for _, f := range free {
			if f == 1000 {
				full++
			}
		}
		return 1 - float64(full)/16
	case 5:
		if r.GPUs == 0 {
			return 1 - float64(tot)/16000.0
		}
		return 0
	case 6:
		if r.GPUs == 0 {
			return 1 - float64(tot)/16000.0
		}
		if r.Shared() {
			return 0
		}
		full := 0
		for _, f := range free {
			if f == 1000 {
				full++
			}
		}
		return 1 - float64(full)/16
	case 4:
		return 1 - (0.5*float64(cpuAfter)/128000+0.5*float64(tot)/8000)/1.01
	}
	return 0
}

func (m meridian) Score(n *Node, r *Request, dst []int) (float64, []int) {
	var buf [maxStackGPUs]int32
	free := freeMilli(n, buf[:0])
	before := m.tw.frag(n.Class, n.CPUMilliFree, free)
	cpuAfter := n.CPUMilliFree - r.CPUMilli
	before -= MeridianExperiment.Lambda * m.tw.pressure[n.Class] * float64(r.TotalMilli())
	w := MeridianExperiment.PackW
	if w == 0 {
		w = 0.999
	}
	if !r.Shared() {
		dst = firstFree(n, r, dst)
		for _, i := range dst {
			free[i] -= r.Milli
		}
		d := before - m.tw.frag(n.Class, cpuAfter, free)
		return m.level(d) + w*m.pack(n, r, free, cpuAfter), dst
	}
	best, bestScore, bestD := -1, 0.0, 0.0
	for i := range n.GPUs {
		if !gpuFits(&n.GPUs[i], r) {
			continue
		}
		free[i] -= r.Milli
		d := before - m.tw.frag(n.Class, cpuAfter, free)
		s := m.level(d) + w*m.pack(n, r, free, cpuAfter)
		free[i] += r.Milli
		if MeridianExperiment.GPUExact {
			if best < 0 || d > bestD || (d == bestD && n.GPUs[i].FreeMilli < n.GPUs[best].FreeMilli) {
				best, bestD, bestScore = i, d, s
			}
		} else if best < 0 || s > bestScore {
			best, bestScore = i, s
		}
	}
	dst = dst[:0]
	if best >= 0 {
		dst = append(dst, best)
	}
	return bestScore, dst
}
