package openb

import (
	"fmt"
	"math"
)

// Comparison is a paired comparison of two runs over the same seeds (the
// same arrivals): per seed, the difference A - B of the allocation at one
// arrived load. A claim that A "beats" B is made only when the 95%
// confidence interval of the mean difference excludes zero.
type Comparison struct {
	A, B string // run labels ("decide/meridian")
	At   int    // arrived load, percent
	// Wins, Ties and Losses count seeds where A is above, equal to (at the
	// two decimals the curve is read to) or below B.
	Wins, Ties, Losses int
	// MeanDiff is the mean paired difference in points, and CILow..CIHigh
	// its 95% confidence interval (Student's t, n-1 degrees of freedom).
	MeanDiff, CILow, CIHigh float64
	N                       int
}

// Verdict is how the comparison may be worded: "beats" or "below" when the
// interval excludes zero, "indistinguishable" otherwise.
func (c Comparison) Verdict() string {
	switch {
	case c.N < 2:
		return "too few seeds"
	case c.CILow > 0:
		return "beats"
	case c.CIHigh < 0:
		return "below"
	}
	return "indistinguishable"
}

func (c Comparison) String() string {
	return fmt.Sprintf("%s vs %s at %d%%: %+.2f points (95%% CI %+.2f..%+.2f), %d wins / %d ties / %d losses over %d seeds: %s",
		c.A, c.B, c.At, c.MeanDiff, c.CILow, c.CIHigh, c.Wins, c.Ties, c.Losses, c.N, c.Verdict())
}

// Compare pairs a and b seed by seed at arrived load at (100 or 130).
// Seeds present in only one of them, or with no sample, are left out.
func Compare(labelA string, a Summary, labelB string, b Summary, at int) Comparison {
	c := Comparison{A: labelA, B: labelB, At: at}
	va, vb := a.At100, b.At100
	if at == 130 {
		va, vb = a.At130, b.At130
	}
	bySeed := map[int64]float64{}
	for i, s := range b.Seeds {
		if i < len(vb) {
			bySeed[s] = float64(vb[i])
		}
	}
	var diffs []float64
	for i, s := range a.Seeds {
		y, ok := bySeed[s]
		if !ok || i >= len(va) || math.IsNaN(float64(va[i])) || math.IsNaN(y) {
			continue
		}
		d := math.Round((float64(va[i])-y)*100) / 100
		switch {
		case d > 0:
			c.Wins++
		case d < 0:
			c.Losses++
		default:
			c.Ties++
		}
		diffs = append(diffs, d)
	}
	c.N = len(diffs)
	if c.N == 0 {
		c.MeanDiff, c.CILow, c.CIHigh = math.NaN(), math.NaN(), math.NaN()
		return c
	}
	m, sd := meanStd(diffs)
	c.MeanDiff = m
	if c.N < 2 {
		c.CILow, c.CIHigh = math.Inf(-1), math.Inf(1)
		return c
	}
	half := tCrit95(c.N-1) * sd / math.Sqrt(float64(c.N))
	c.CILow, c.CIHigh = m-half, m+half
	return c
}

// tCrit95 is the two-sided 95% critical value of Student's t with df
// degrees of freedom.
func tCrit95(df int) float64 {
	table := []float64{0, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
		2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}
	switch {
	case df <= 0:
		return math.Inf(1)
	case df < len(table):
		return table[df]
	case df < 60:
		return 2.021 // df 40
	case df < 120:
		return 2.000 // df 60
	}
	return 1.960
}
