package quantity

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"0", 0}, {"8", 8000}, {"0.5", 500}, {"1.25", 1250}, {"0.001", 1},
		{"2500m", 2500}, {"0m", 0}, {"007", 7000},
		{"1000000000", Max},
	} {
		got, err := Parse(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for in, want := range map[string]string{
		"":               "is empty",
		"-1":             "negative",
		"-0.5":           "negative",
		"1e3":            "not a GPU quantity",
		" 1":             "not a GPU quantity",
		"1 ":             "not a GPU quantity",
		"eight":          "not a GPU quantity",
		"1.5m":           "whole number",
		"0.0001":         "three decimals",
		".5":             "not a GPU quantity",
		"+1":             "not a GPU quantity",
		"1000000001":     "more than the hub allows",
		"99999999999":    "more than the hub allows",
		"1000000000001m": "more than the hub allows",
		"m":              "whole number",
	} {
		_, err := Parse(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) err = %v; want one containing %q", in, err, want)
		}
	}
}

func TestFormat(t *testing.T) {
	for milli, want := range map[int64]string{0: "0", 8000: "8", 500: "0.5", 1250: "1.25", 1: "0.001", 1010: "1.01"} {
		if got := Format(milli); got != want {
			t.Errorf("Format(%d) = %q; want %q", milli, got, want)
		}
	}
	if !Equal("2500m", "2.5") || Equal("2", "2.5") || Equal("x", "x") {
		t.Error("Equal disagrees with Parse")
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"8", "0.5", "2500m", "-1", "1e3", "", "1.2345", "99999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := Parse(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("Parse(%q): empty error", s)
			}
			return
		}
		if v < 0 || v > Max {
			t.Fatalf("Parse(%q) = %d, outside 0..Max", s, v)
		}
		if back, err := Parse(Format(v)); err != nil || back != v {
			t.Fatalf("Parse(Format(%d)) = %d, %v", v, back, err)
		}
	})
}
