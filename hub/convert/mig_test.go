package convert

import (
	"strings"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/hub/scheduler"
	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

func TestRequestMIGProfile(t *testing.T) {
	p3 := gpufit.MIGProfile{Slices: 3, MemGB: 40}
	mig := meridianv1.FractionalMode_FRACTIONAL_MODE_MIG
	tests := map[string]struct {
		in      *meridianv1.Resources
		want    gpufit.Request
		wantErr string
	}{
		"profile alone":            {in: &meridianv1.Resources{MigProfile: "3g.40gb", CpuMilli: 100}, want: gpufit.Request{CPUMilli: 100, GPUs: 1, Milli: 428, MIG: p3}},
		"profile with mode mig":    {in: &meridianv1.Resources{MigProfile: "3g.40gb", FractionalMode: mig, GpuMilli: 400, GpuMemoryMib: 40000}, want: gpufit.Request{GPUs: 1, Milli: 428, MIG: p3}},
		"bad name":                 {in: &meridianv1.Resources{MigProfile: "3g"}, wantErr: `mig_profile: "3g" is not a MIG profile`},
		"too many slices":          {in: &meridianv1.Resources{MigProfile: "9g.90gb"}, wantErr: "mig_profile:"},
		"other mode":               {in: &meridianv1.Resources{MigProfile: "1g.10gb", GpuMilli: 100, FractionalMode: meridianv1.FractionalMode_FRACTIONAL_MODE_MPS}, wantErr: "fractional_mode:"},
		"more compute than slices": {in: &meridianv1.Resources{MigProfile: "1g.10gb", GpuMilli: 500}, wantErr: "gpu_milli: 500 is more than mig_profile 1g.10gb"},
		"whole gpus":               {in: &meridianv1.Resources{MigProfile: "7g.80gb", GpuMilli: 2000}, wantErr: "gpu_milli:"},
		"more memory than profile": {in: &meridianv1.Resources{MigProfile: "1g.10gb", GpuMemoryMib: 20000}, wantErr: "gpu_memory_mib:"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Request(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want prefix %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Request = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	w, err := Workload(&meridianv1.Workload{Id: "w", PodSets: []*meridianv1.PodSet{{Name: "a", Replicas: 1, Resources: &meridianv1.Resources{MigProfile: "3g.40gb"}}}}, nil)
	if err != nil || w.PodSets[0].Mode != scheduler.FracMIG || w.PodSets[0].Req.MIG != p3 {
		t.Fatalf("Workload with a MIG profile = %+v, %v; want mode MIG and profile 3g.40gb", w, err)
	}
}

func migAd(strategy agentv1.MigStrategy, profs ...*agentv1.MigSlice) *agentv1.Advertisement {
	return &agentv1.Advertisement{ClusterId: "c", MigStrategy: strategy, Nodes: []*agentv1.Node{{
		Name: "n", AcceleratorClass: "h100", Schedulable: true, CpuMilliFree: 1000,
		Gpus: []*agentv1.Gpu{
			{Index: 0, FreeMilli: 1000, FreeMemoryMib: 81920, TotalMemoryMib: 81920, Healthy: true},
			{Index: 1, FreeMilli: 571, FreeMemoryMib: 40960, TotalMemoryMib: 81920, Healthy: true, MigProfiles: profs},
		},
	}}}
}

func TestClusterMIGLayouts(t *testing.T) {
	s := func(p string, free, total int32) *agentv1.MigSlice {
		return &agentv1.MigSlice{Profile: p, Free: free, Total: total}
	}
	c, err := Cluster(migAd(agentv1.MigStrategy_MIG_STRATEGY_MIXED, s("3g.40gb", 0, 1), s("4g.40gb", 3, 1)), scheduler.ClusterReady, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	n := c.Nodes[0].Res
	if n.GPUs[0].MIG != 0 || n.GPUs[1].MIG != 1 || len(n.MIG) != 1 {
		t.Fatalf("GPU MIG indices %+v, layouts %+v", n.GPUs, n.MIG)
	}
	want := []gpufit.MIGSlot{{Profile: gpufit.MIGProfile{Slices: 3, MemGB: 40}}, {Profile: gpufit.MIGProfile{Slices: 4, MemGB: 40}, Free: 1}}
	for i, sl := range n.MIG[0].Slots {
		if sl != want[i] {
			t.Fatalf("slot %d = %+v, want %+v (free clamped to total)", i, sl, want[i])
		}
	}
	for name, tc := range map[string]struct {
		ad   *agentv1.Advertisement
		want string
	}{
		"single with two profiles": {migAd(agentv1.MigStrategy_MIG_STRATEGY_SINGLE, s("3g.40gb", 1, 1), s("4g.40gb", 1, 1)), "nodes[0].gpus[1].mig_profiles: the cluster's mig_strategy is SINGLE"},
		"none with profiles":       {migAd(agentv1.MigStrategy_MIG_STRATEGY_NONE, s("3g.40gb", 1, 1)), "nodes[0].gpus[1].mig_profiles: the cluster's mig_strategy is NONE"},
		"bad profile":              {migAd(agentv1.MigStrategy_MIG_STRATEGY_MIXED, s("big", 1, 1)), "nodes[0].gpus[1].mig_profiles[0].profile:"},
		"profile twice":            {migAd(agentv1.MigStrategy_MIG_STRATEGY_MIXED, s("1g.10gb", 1, 1), s("1g.10gb", 1, 1)), "listed twice"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Cluster(tc.ad, scheduler.ClusterReady, time.Time{}); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if c, err := Cluster(migAd(agentv1.MigStrategy_MIG_STRATEGY_SINGLE, s("3g.40gb", 2, 2)), scheduler.ClusterReady, time.Time{}); err != nil || len(c.Nodes[0].Res.MIG) != 1 {
		t.Fatalf("single strategy, one profile: %v", err)
	}
}

func TestPlacementCarriesSizeAndMIG(t *testing.T) {
	got := Placement([]scheduler.PodSetPlacement{{PodSet: "a", MIG: "1g.10gb", Replicas: []scheduler.ReplicaPlacement{{Node: "n1"}, {Node: "n2"}}}})
	if len(got) != 1 || got[0].GetReplicas() != 2 || got[0].GetMigProfile() != "1g.10gb" || len(got[0].GetNodes()) != 2 {
		t.Fatalf("Placement = %v", got)
	}
}
