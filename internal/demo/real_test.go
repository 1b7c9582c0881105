package demo

import (
	"context"
	"fmt"
	"maps"
	"math/rand"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// nopConnector stands in for a real cluster's connector; these tests only
// check how the demo wires a real spoke, not the cluster.
type nopConnector struct{}

func (nopConnector) Kind() string { return "nop" }
func (nopConnector) Inventory(context.Context) (*agent.Inventory, error) {
	return &agent.Inventory{}, nil
}
func (nopConnector) Launch(context.Context, *agentv1.Dispatch) error  { return nil }
func (nopConnector) Cancel(context.Context, string, bool) error       { return nil }
func (nopConnector) List(context.Context) ([]agent.WorkStatus, error) { return nil, nil }
func (nopConnector) Events() <-chan agent.WorkEvent                   { return nil }

func script(run time.Duration, exit int) *meridianv1.RuntimeTemplate {
	return &meridianv1.RuntimeTemplate{Kind: &meridianv1.RuntimeTemplate_Slurm{Slurm: &meridianv1.SlurmTemplate{
		Script: fmt.Sprintf("#!/bin/bash\nsleep %.3f\nexit %d\n", run.Seconds(), exit)}}}
}

func TestCapacityOfTheSimulatedFederationMatchesClassGPUs(t *testing.T) {
	got, err := capacity(clusters, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, classGPUs) {
		t.Fatalf("capacity of the example clusters %v, classGPUs %v", got, classGPUs)
	}
}

func TestRealSpokeReplacesOneSimulatedCluster(t *testing.T) {
	real := &Spoke{ID: "slurm-local", What: "real", Replaces: "us-east", Connector: nopConnector{},
		GPUs: map[string]int64{"nvidia-h100-80gb": 32}, Runtime: script}
	specs, err := Options{Real: real}.spokes()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range specs {
		ids = append(ids, s.id)
	}
	if strings.Join(ids, ",") != "slurm-local,eu-west,us-west" || specs[0].conn == nil {
		t.Fatalf("spokes %v", ids)
	}
	gpus, err := capacity(specs, real)
	if err != nil {
		t.Fatal(err)
	}
	want := maps.Clone(classGPUs)
	want["nvidia-h100-80gb"] = 32 // us-east's 64 H100 replaced by the real 32
	if !maps.Equal(gpus, want) {
		t.Fatalf("capacity %v, want %v", gpus, want)
	}

	for name, bad := range map[string]*Spoke{
		"unknown replaced cluster": {ID: "x", Replaces: "nowhere", Connector: nopConnector{}, Runtime: script},
		"no connector":             {ID: "x", Replaces: "us-east", Runtime: script},
		"no runtime":               {ID: "x", Replaces: "us-east", Connector: nopConnector{}},
	} {
		if _, err := (Options{Real: bad}).spokes(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestAddRuntimesScalesDurationAndKeepsExitCode(t *testing.T) {
	mix := generate(200, rand.New(rand.NewSource(42)))
	if err := addRuntimes(mix, &Spoke{Runtime: script}, 60); err != nil {
		t.Fatal(err)
	}
	fails := 0
	for _, it := range mix {
		sc := it.w.GetRuntime().GetSlurm().GetScript()
		d, _ := time.ParseDuration(it.w.Labels["meridian.io/sim-duration"])
		wantSleep := fmt.Sprintf("sleep %.3f\n", (d / 60).Seconds())
		if !strings.Contains(sc, wantSleep) {
			t.Fatalf("%s (%s): script %q lacks %q", it.w.Name, d, sc, wantSleep)
		}
		if _, fail := it.w.Labels["meridian.io/sim-exit-code"]; fail {
			fails++
			if !strings.HasSuffix(sc, "exit 3\n") {
				t.Fatalf("%s fails in the simulation but its script is %q", it.w.Name, sc)
			}
		} else if !strings.HasSuffix(sc, "exit 0\n") {
			t.Fatalf("%s succeeds in the simulation but its script is %q", it.w.Name, sc)
		}
	}
	if fails == 0 {
		t.Fatal("the mix of 200 has no failing workload to check")
	}
}
