package quantity

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MilliPerGPU is how many milli make one GPU.
const MilliPerGPU = 1000

// Max is the largest quantity the hub accepts, in milli (the hub's
// validation.MaxQuotaMilli: a billion GPUs).
const Max = 1_000_000_000_000

// maxLen bounds the input: no valid quantity is longer.
const maxLen = 32

// Parse reads a GPU quantity and returns it in milli. Accepted forms:
// "8" (GPUs), "0.5" or "1.25" (GPUs, at most three decimals, since milli is
// the unit), and "2500m" (milli). Signs, exponents, spaces, empty strings
// and values above Max are errors.
func Parse(s string) (int64, error) {
	if s == "" {
		return 0, errors.New("is empty; write a number of GPUs such as \"8\" or \"0.5\", or GPU milli such as \"2500m\"")
	}
	if len(s) > maxLen {
		return 0, fmt.Errorf("is too long (%d characters) to be a GPU quantity", len(s))
	}
	if s[0] == '-' {
		return 0, fmt.Errorf("%q is negative; quotas are 0 or more", s)
	}
	if digits, ok := strings.CutSuffix(s, "m"); ok {
		if !allDigits(digits) {
			return 0, fmt.Errorf("%q is not a GPU quantity: milli must be a whole number, such as \"2500m\"", s)
		}
		v, err := strconv.ParseInt(digits, 10, 64)
		if err != nil || v > Max {
			return 0, fmt.Errorf("%q is more than the hub allows (%s)", s, Format(Max))
		}
		return v, nil
	}
	whole, frac, hasDot := strings.Cut(s, ".")
	if !allDigits(whole) || (hasDot && !allDigits(frac)) {
		return 0, fmt.Errorf("%q is not a GPU quantity: write a number of GPUs such as \"8\" or \"0.5\", or GPU milli such as \"2500m\"", s)
	}
	if len(frac) > 3 {
		return 0, fmt.Errorf("%q has more than three decimals; the smallest unit is 0.001 GPU (1m)", s)
	}
	if len(whole) > 10 {
		return 0, fmt.Errorf("%q is more than the hub allows (%s)", s, Format(Max))
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a GPU quantity", s)
	}
	var f int64
	if frac != "" {
		f, _ = strconv.ParseInt((frac + "00")[:3], 10, 64)
	}
	v := w*MilliPerGPU + f
	if v > Max {
		return 0, fmt.Errorf("%q is more than the hub allows (%s)", s, Format(Max))
	}
	return v, nil
}

// allDigits reports whether s is one or more ASCII digits.
func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Format writes milli in the canonical form: whole GPUs when it is a
// multiple of 1000 ("8"), else GPUs with up to three decimals ("0.5",
// "1.25"). Parse(Format(v)) == v for every v in 0..Max.
func Format(milli int64) string {
	if milli < 0 {
		return strconv.FormatInt(milli, 10) + "m"
	}
	w, f := milli/MilliPerGPU, milli%MilliPerGPU
	if f == 0 {
		return strconv.FormatInt(w, 10)
	}
	return strconv.FormatInt(w, 10) + "." + strings.TrimRight(fmt.Sprintf("%03d", f), "0")
}

// Equal reports whether two quantity strings mean the same milli; a
// string that does not parse equals nothing.
func Equal(a, b string) bool {
	x, err1 := Parse(a)
	y, err2 := Parse(b)
	return err1 == nil && err2 == nil && x == y
}
