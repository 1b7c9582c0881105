package openb

import (
	"errors"
	"math"
)

// errLPIterations is returned when the simplex runs past its pivot budget.
var errLPIterations = errors.New("openb: lp: pivot budget exhausted")

// lpMax solves max c·x subject to A x <= b, x >= 0, with b >= 0, by the
// dense primal simplex (slack basis start, Dantzig pricing, Bland's rule
// while degenerate pivots repeat). A is row-major, len(A) == len(b), every
// row of length len(c). It returns the primal solution x, the row duals y
// (y >= 0 at optimality, up to round-off) and the objective. The problems
// here have a few hundred rows and a few thousand columns.
//
// Floating point makes the returned objective approximate; callers that need
// a provable bound use y through safeDualBound, which repairs y into an exact
// dual-feasible point.
func lpMax(A [][]float64, b, c []float64) (x, y []float64, obj float64, err error) {
	m, n := len(b), len(c)
	w := n + m + 1 // structural columns, slacks, rhs
	T := make([]float64, m*w)
	for i := 0; i < m; i++ {
		row := T[i*w : (i+1)*w]
		copy(row, A[i])
		row[n+i] = 1
		row[w-1] = b[i]
	}
	d := make([]float64, n+m) // reduced costs c_j - c_B B^-1 A_j
	copy(d, c)
	basis := make([]int, m)
	for i := range basis {
		basis[i] = n + i
	}
	const eps = 1e-9
	degenerate := 0
	for iter := 0; ; iter++ {
		if iter > 200000 {
			return nil, nil, 0, errLPIterations
		}
		e := -1
		if degenerate > 50 {
			for j := 0; j < n+m; j++ { // Bland: first improving column
				if d[j] > eps {
					e = j
					break
				}
			}
		} else {
			best := eps
			for j := 0; j < n+m; j++ {
				if d[j] > best {
					best, e = d[j], j
				}
			}
		}
		if e < 0 {
			break
		}
		r := -1
		var ratio float64
		for i := 0; i < m; i++ {
			a := T[i*w+e]
			if a <= eps {
				continue
			}
			q := T[i*w+w-1] / a
			if r < 0 || q < ratio-1e-12 || (q <= ratio+1e-12 && basis[i] < basis[r]) {
				r, ratio = i, q
			}
		}
		if r < 0 {
			return nil, nil, 0, errors.New("openb: lp: unbounded")
		}
		if ratio <= 1e-12 {
			degenerate++
		} else {
			degenerate = 0
		}
		prow := T[r*w : (r+1)*w]
		pv := prow[e]
		for j := range prow {
			prow[j] /= pv
		}
		prow[e] = 1
		for i := 0; i < m; i++ {
			if i == r {
				continue
			}
			row := T[i*w : (i+1)*w]
			f := row[e]
			if f == 0 {
				continue
			}
			for j, v := range prow {
				if v != 0 {
					row[j] -= f * v
				}
			}
			row[e] = 0
		}
		f := d[e]
		for j := 0; j < n+m; j++ {
			d[j] -= f * prow[j]
		}
		d[e] = 0
		obj += f * prow[w-1]
		basis[r] = e
	}
	x = make([]float64, n)
	for i, j := range basis {
		if j < n {
			x[j] = math.Max(0, T[i*w+w-1])
		}
	}
	y = make([]float64, m)
	for i := range y {
		y[i] = -d[n+i]
	}
	return x, y, obj, nil
}
