package sim

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/meridian-gpu/meridian/hub/scheduler"
)

func TestContentionSharesFollowWeights(t *testing.T) {
	res := mustRun(t, Contention(42, 16))
	if res.Dispatches == 0 || res.Completed == 0 {
		t.Fatalf("nothing ran: %+v", res)
	}
	for _, tr := range res.Teams {
		if d := tr.Share - tr.WeightShare; d > 2 || d < -2 {
			t.Errorf("%s: share %.2f%% vs weight share %.2f%% (off by %.2f points, want within 2)", tr.Queue, tr.Share, tr.WeightShare, d)
		}
	}
	if res.Utilization < 90 {
		t.Errorf("utilization %.1f%%, want >= 90%% in an oversubscribed federation", res.Utilization)
	}
}

func TestRunIsDeterministic(t *testing.T) {
	a := mustRun(t, Contention(7, 6))
	b := mustRun(t, Contention(7, 6))
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("two runs of one scenario and seed differ:\n%+v\n%+v", a, b)
	}
	c := mustRun(t, Contention(8, 6))
	if reflect.DeepEqual(a.Teams, c.Teams) {
		t.Fatal("a different seed gave the identical result; the seed is not used")
	}
}

func TestExampleScenarioRuns(t *testing.T) {
	data, err := os.ReadFile("../../examples/sim/two-teams.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sc, err := ParseScenario(data)
	if err != nil {
		t.Fatal(err)
	}
	res := mustRun(t, sc)
	if res.Jobs < 100 || res.Completed == 0 {
		t.Fatalf("example ran %d jobs, completed %d", res.Jobs, res.Completed)
	}
	var sb strings.Builder
	res.WriteTable(&sb)
	if !strings.Contains(sb.String(), "lab/vision") {
		t.Fatalf("table misses a team:\n%s", sb.String())
	}
}

func TestParseScenarioErrorsNameTheField(t *testing.T) {
	base := "duration: 1h\nclusters: [{id: a, nodeGroups: [{count: 1, class: x, gpus: 8}]}]\nqueues: [{path: t, weight: 1}]\n"
	tests := map[string]struct{ yaml, field string }{
		"not yaml":           {"{{{", "scenario"},
		"unknown field":      {base + "bogus: 1\n", "bogus"},
		"no duration":        {"clusters: [{id: a, nodeGroups: [{count: 1, class: x, gpus: 8}]}]\nqueues: [{path: t}]\n", "duration"},
		"bad duration":       {"duration: soon\n", "invalid duration"},
		"no clusters":        {"duration: 1h\nqueues: [{path: t}]\n", "clusters"},
		"duplicate cluster":  {"duration: 1h\nclusters: [{id: a, nodeGroups: [{count: 1, class: x, gpus: 1}]}, {id: a, nodeGroups: [{count: 1, class: x, gpus: 1}]}]\nqueues: [{path: t}]\n", "clusters[1].id"},
		"zero nodes":         {"duration: 1h\nclusters: [{id: a, nodeGroups: [{count: 0, class: x, gpus: 1}]}]\nqueues: [{path: t}]\n", "clusters[0].nodeGroups[0].count"},
		"gpus without class": {"duration: 1h\nclusters: [{id: a, nodeGroups: [{count: 1, gpus: 1}]}]\nqueues: [{path: t}]\n", "clusters[0].nodeGroups[0].class"},
		"bad mode":           {"duration: 1h\nclusters: [{id: a, fractionalModes: [magic], nodeGroups: [{count: 1, class: x, gpus: 1}]}]\nqueues: [{path: t}]\n", "fractionalModes"},
		"bad job milli":      {base + "jobs: [{queue: t, replicas: 1, gpuMilli: 1500, runtime: 1m}]\n", "jobs[0].gpuMilli"},
		"job no replicas":    {base + "jobs: [{queue: t, gpuMilli: 1000, runtime: 1m}]\n", "jobs[0].replicas"},
		"bad topology":       {base + "jobs: [{queue: t, replicas: 1, gpuMilli: 1000, runtime: 1m, topology: galaxy}]\n", "jobs[0].topology"},
		"bad size":           {base + "generate: [{queue: t, jobsPerHour: 1, minRuntime: 1m, maxRuntime: 2m, sizes: [x3]}]\n", "generate[0].sizes"},
		"no rate":            {base + "generate: [{queue: t, minRuntime: 1m, maxRuntime: 2m, sizes: ['1']}]\n", "generate[0].jobsPerHour"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ParseScenario([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error = %v, want it to name %q", err, tc.field)
			}
		})
	}
}

func TestUnknownQueueInJobIsAnError(t *testing.T) {
	sc, err := ParseScenario([]byte("duration: 1h\nclusters: [{id: a, nodeGroups: [{count: 1, class: x, gpus: 8}]}]\nqueues: [{path: t, weight: 1}]\njobs: [{queue: nope, replicas: 1, gpuMilli: 1000, runtime: 1m}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(sc, scheduler.DefaultConfig()); err == nil || !strings.Contains(err.Error(), "jobs[0].queue") {
		t.Fatalf("error = %v, want jobs[0].queue", err)
	}
}

func FuzzParseScenario(f *testing.F) {
	f.Add([]byte("duration: 1h\nclusters: [{id: a, nodeGroups: [{count: 1, class: x, gpus: 8}]}]\nqueues: [{path: t, weight: 1}]\n"))
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := ParseScenario(data)
		if err != nil {
			return
		}
		// A valid scenario must build (or fail cleanly), never panic. Keep
		// the fuzzer away from scenarios that are merely large.
		nodes := 0
		for _, c := range sc.Clusters {
			for _, g := range c.NodeGroups {
				nodes += g.Count
			}
		}
		for _, g := range sc.Generate {
			if g.JobsPerHour > 100 {
				return
			}
		}
		if nodes > 1000 || len(sc.Jobs) > 1000 {
			return
		}
		sc.Duration = Duration(min(int64(sc.Duration), int64(3600e9)))
		if _, err := New(sc, scheduler.DefaultConfig()); err != nil {
			return
		}
	})
}

func mustRun(t *testing.T, sc *Scenario) *Result {
	t.Helper()
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	e, err := New(sc, scheduler.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return e.Run(nil)
}
