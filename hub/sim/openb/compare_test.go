package openb

import (
	"math"
	"testing"
)

func summaryOf(seeds []int64, at100 ...float64) Summary {
	s := Summary{Seeds: seeds}
	for _, v := range at100 {
		s.At100 = append(s.At100, Pct(v))
		s.At130 = append(s.At130, Pct(v+1))
	}
	return s
}

func TestComparePairsSeeds(t *testing.T) {
	seeds := []int64{1, 2, 3, 4, 5}
	a := summaryOf(seeds, 95.10, 95.20, 95.30, 95.00, 95.25)
	b := summaryOf(seeds, 95.00, 95.00, 95.30, 95.10, 95.00)
	c := Compare("a", a, "b", b, 100)
	if c.Wins != 3 || c.Ties != 1 || c.Losses != 1 || c.N != 5 {
		t.Fatalf("w/t/l %d/%d/%d n %d, want 3/1/1 of 5", c.Wins, c.Ties, c.Losses, c.N)
	}
	// diffs 0.10 0.20 0 -0.10 0.25: mean 0.09, sd 0.1432, t(4)=2.776
	if math.Abs(c.MeanDiff-0.09) > 1e-9 {
		t.Fatalf("mean diff %v, want 0.09", c.MeanDiff)
	}
	half := 2.776 * 0.14317821063276354 / math.Sqrt(5)
	if math.Abs(c.CILow-(0.09-half)) > 1e-6 || math.Abs(c.CIHigh-(0.09+half)) > 1e-6 {
		t.Fatalf("CI %v..%v, want %v..%v", c.CILow, c.CIHigh, 0.09-half, 0.09+half)
	}
	if c.Verdict() != "indistinguishable" {
		t.Fatalf("verdict %q: the interval contains zero", c.Verdict())
	}
}

func TestCompareVerdicts(t *testing.T) {
	seeds := []int64{1, 2, 3, 4}
	up := Compare("a", summaryOf(seeds, 95.3, 95.4, 95.35, 95.32), "b", summaryOf(seeds, 95.0, 95.1, 95.0, 95.05), 130)
	if up.Verdict() != "beats" || up.At != 130 {
		t.Fatalf("%s", up)
	}
	down := Compare("b", summaryOf(seeds, 95.0, 95.1, 95.0, 95.05), "a", summaryOf(seeds, 95.3, 95.4, 95.35, 95.32), 100)
	if down.Verdict() != "below" {
		t.Fatalf("%s", down)
	}
	// Unpaired seeds are left out.
	odd := Compare("a", summaryOf([]int64{1, 2}, 95, 96), "b", summaryOf([]int64{2, 3}, 95, 95), 100)
	if odd.N != 1 || odd.Verdict() != "too few seeds" {
		t.Fatalf("%s", odd)
	}
}

func TestTCrit(t *testing.T) {
	if tCrit95(9) != 2.262 || tCrit95(19) != 2.093 || tCrit95(1000) != 1.96 || !math.IsInf(tCrit95(0), 1) {
		t.Fatal("t critical values")
	}
}
