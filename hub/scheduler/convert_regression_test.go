package scheduler_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/hub/convert"
	"github.com/meridian-gpu/meridian/hub/quota"
	"github.com/meridian-gpu/meridian/hub/scheduler"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// The API's whole-GPU request with gpu_memory_mib, through the conversion
// the hub uses, lands on the only H100 cluster even though that cluster
// has no sharing modes (it used to be filtered out as "without fractional
// mode any").
func TestWholeGPUMemoryThroughConversion(t *testing.T) {
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	node := func(name, class string, gpus int, memMiB int64) *agentv1.Node {
		n := &agentv1.Node{Name: name, AcceleratorClass: class, Schedulable: true, CpuMilliFree: 128000, MemoryMibFree: 1 << 20}
		for i := 0; i < gpus; i++ {
			n.Gpus = append(n.Gpus, &agentv1.Gpu{Index: int32(i), FreeMilli: 1000, FreeMemoryMib: memMiB, TotalMemoryMib: memMiB, Healthy: true})
		}
		return n
	}
	ads := []*agentv1.Advertisement{
		{ClusterId: "a100-east", FractionalModes: []meridianv1.FractionalMode{meridianv1.FractionalMode_FRACTIONAL_MODE_MPS},
			Nodes: []*agentv1.Node{node("e1", "nvidia-a100-40gb", 8, 40960)}},
		{ClusterId: "a100-west", FractionalModes: []meridianv1.FractionalMode{meridianv1.FractionalMode_FRACTIONAL_MODE_TIME_SLICE},
			Nodes: []*agentv1.Node{node("w1", "nvidia-a100-40gb", 8, 40960)}},
		{ClusterId: "h100", Nodes: []*agentv1.Node{node("h1", "nvidia-h100-80gb", 8, 81920)}},
	}
	var clusters []scheduler.Cluster
	for _, ad := range ads {
		c, err := convert.Cluster(ad, scheduler.ClusterReady, now)
		if err != nil {
			t.Fatal(err)
		}
		clusters = append(clusters, c)
	}
	tree, err := quota.NewTree([]quota.QueueSpec{{Path: "acme", Weight: 1}, {Path: "acme/train", Weight: 1,
		Limits: map[string]quota.Limits{quota.AnyClass: {Nominal: 64000, BorrowLimit: 0, LendLimit: -1}}}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		memMiB  int32
		cluster string
		code    scheduler.ReasonCode
	}{
		{"whole GPUs with 80 GiB each fit the H100s", 81920, "h100", 0},
		{"whole GPUs with 40 GiB each fit the H100s too", 40960, "h100", 0},
		{"whole GPUs with more memory than any H100 never fit", 81921, "", scheduler.ReasonNeverFits},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			api := &meridianv1.Workload{Id: "w", Queue: "acme/train", PodSets: []*meridianv1.PodSet{{
				Name: "worker", Replicas: 1,
				Resources: &meridianv1.Resources{GpuMilli: 8000, GpuMemoryMib: tc.memMiB, AcceleratorClass: "nvidia-h100-80gb"},
			}}}
			w, err := convert.Workload(api, nil)
			if err != nil {
				t.Fatal(err)
			}
			p := scheduler.Decide(&scheduler.Snapshot{Now: now, Queues: tree, Clusters: clusters, Pending: []*scheduler.Workload{w}}, scheduler.DefaultConfig())
			got := fmt.Sprintf("dispatches %v, pending %+v", p.Dispatches, p.Pending)
			switch {
			case tc.cluster != "" && (len(p.Dispatches) != 1 || p.Dispatches[0].Cluster != tc.cluster):
				t.Fatalf("%s; want a dispatch to %s", got, tc.cluster)
			case tc.cluster == "" && (len(p.Pending) != 1 || p.Pending[0].Code != tc.code):
				t.Fatalf("%s; want pending with %v", got, tc.code)
			}
		})
	}
}
