package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/meridian-gpu/meridian/hub/sim/openb"
)

func TestOpenBBoundFlagErrors(t *testing.T) {
	for name, args := range map[string][]string{
		"bad at":    {"openb-bound", "--at", "0"},
		"bad seeds": {"openb-bound", "--seeds", "9-1"},
		"extra arg": {"openb-bound", "x"},
	} {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(context.Background(), args, &out, &errb); code == 0 {
				t.Fatalf("exit 0, want an error: %s", errb.String())
			}
		})
	}
}

func TestOpenBBoundSmoke(t *testing.T) {
	if _, err := openb.DataDir(); err != nil {
		if os.Getenv("MERIDIAN_REQUIRE_DATA") == "1" {
			t.Fatalf("MERIDIAN_REQUIRE_DATA=1 but the OpenB trace is missing: %v", err)
		}
		t.Skipf("skipping: OpenB trace data not available (%v)", err)
	}
	var out, errb bytes.Buffer
	args := []string{"openb-bound", "--seeds", "42", "--at", "30", "--json"}
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var obj struct {
		Runs []struct {
			PodList    string  `json:"pod_list"`
			MeanBound  float64 `json:"mean_bound_pct"`
			MeanPacked float64 `json:"mean_packed_pct"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &obj); err != nil {
		t.Fatalf("last stdout line is not JSON: %v\n%s", err, out.String())
	}
	if len(obj.Runs) != 1 || obj.Runs[0].PodList != "default" || obj.Runs[0].MeanBound < obj.Runs[0].MeanPacked || obj.Runs[0].MeanPacked < 29 {
		t.Fatalf("JSON wrong: %+v", obj)
	}
	if !strings.Contains(out.String(), "default") || !strings.Contains(errb.String(), "[1/1]") {
		t.Fatalf("no table or progress:\n%s\n%s", out.String(), errb.String())
	}
}
