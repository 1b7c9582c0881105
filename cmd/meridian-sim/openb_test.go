package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meridian-gpu/meridian/hub/sim/openb"
)

func TestParseSeeds(t *testing.T) {
	tests := map[string]struct {
		in   string
		want []int64
		err  bool
	}{
		"range":      {"42-45", []int64{42, 43, 44, 45}, false},
		"list":       {"42,50", []int64{42, 50}, false},
		"mixed":      {"1-2,7", []int64{1, 2, 7}, false},
		"reversed":   {"5-3", nil, true},
		"garbage":    {"x", nil, true},
		"empty":      {"", nil, true},
		"huge range": {"0-100000", nil, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseSeeds(tc.in)
			if tc.err {
				if err == nil {
					t.Fatalf("parseSeeds(%q) = %v, want an error", tc.in, got)
				}
				return
			}
			if err != nil || len(got) != len(tc.want) {
				t.Fatalf("parseSeeds(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("parseSeeds(%q) = %v, want %v", tc.in, got, tc.want)
				}
			}
		})
	}
}

func TestOpenBFlagErrors(t *testing.T) {
	tests := map[string]struct {
		args []string
		want string
	}{
		"unknown policy":  {[]string{"openb", "--policy", "nope"}, "--policy"},
		"zero clusters":   {[]string{"openb", "--clusters", "0"}, "--clusters"},
		"bad seeds":       {[]string{"openb", "--seeds", "9-1"}, "--seeds"},
		"missing nodes":   {[]string{"openb", "--nodes", filepath.Join(t.TempDir(), "none.csv"), "--pods", "x.csv"}, "--nodes"},
		"stray argument":  {[]string{"openb", "extra"}, "unexpected argument"},
		"unknown subcmd":  {[]string{"nosuch"}, "unknown subcommand"},
		"bad pipeline":    {[]string{"openb", "--pipeline", "kernel,fast"}, "--pipeline"},
		"bad target":      {[]string{"openb", "--target", "future"}, "--target"},
		"bad half-life":   {[]string{"openb", "--history-half-life", "0"}, "--history-half-life"},
		"bad popularity":  {[]string{"openb", "--popularity", "1.5"}, "--popularity"},
		"zero popularity": {[]string{"openb", "--popularity", "0"}, "--popularity"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(context.Background(), tc.args, &out, &errb); code == 0 {
				t.Fatalf("exit code 0, want non-zero; stderr %q", errb.String())
			}
			if !strings.Contains(errb.String(), tc.want) {
				t.Fatalf("stderr %q does not mention %q", errb.String(), tc.want)
			}
		})
	}
}

// TestOpenBSmoke runs a short slice of the replay through the command and
// checks the table and the --json contract (last stdout line).
func TestOpenBSmoke(t *testing.T) {
	if _, err := openb.DataDir(); err != nil {
		if os.Getenv("MERIDIAN_REQUIRE_DATA") == "1" {
			t.Fatalf("MERIDIAN_REQUIRE_DATA=1 but the OpenB trace is missing: %v", err)
		}
		t.Skipf("skipping: OpenB trace data not available (%v)", err)
	}
	outFile := filepath.Join(t.TempDir(), "r.csv")
	var out, errb bytes.Buffer
	args := []string{"openb", "--seeds", "42,43", "--policy", "bestfit,fgd", "--max-pods", "400", "--clusters", "2", "--pipeline", "kernel,decide", "--json", "--out", outFile}
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var obj map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &obj); err != nil {
		t.Fatalf("last stdout line is not JSON: %v\n%s", err, out.String())
	}
	for _, k := range []string{"policy", "seeds", "clusters", "alloc_pct_at_arrival", "runs"} {
		if _, ok := obj[k]; !ok {
			t.Fatalf("JSON lacks %q: %v", k, obj)
		}
	}
	if obj["policy"] != "bestfit" || obj["clusters"].(float64) != 2 || len(obj["runs"].([]any)) != 4 {
		t.Fatalf("JSON summary wrong: %v", obj)
	}
	for _, want := range []string{"pod list default, pipeline kernel, policy fgd, clusters 2", "pod list default, pipeline decide, policy fgd, clusters 2",
		"kernel/bestfit vs kernel/fgd at 100%", "decide/fgd vs kernel/fgd at 130%"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
	// bestfit vs fgd and decide vs kernel for each policy, at 100 and 130.
	if comps, _ := obj["comparisons"].([]any); len(comps) != 2*2+2*2 {
		t.Fatalf("JSON has %d comparisons, want 8: %v", len(comps), obj["comparisons"])
	}
	csv, err := os.ReadFile(outFile)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(csv), "\n"); n != 9 { // header + 2 pipelines x 2 policies x 2 seeds
		t.Fatalf("--out CSV has %d lines, want 9:\n%s", n, csv)
	}
	if !strings.Contains(errb.String(), "[8/8]") {
		t.Fatalf("no progress on stderr: %q", errb.String())
	}
}
