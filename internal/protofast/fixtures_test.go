package protofast

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

var t0 = time.Date(2026, 12, 2, 4, 0, 0, 123456789, time.UTC)

func ts(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(t0.Add(d)) }

// storedWorkload is a workload as the hub stores it while it runs: the
// spec with labels, a selector, two pod sets and a container template
// with an opaque extra struct, and a status with conditions, timestamps
// and the folded dispatch record (planned nodes and GPUs, quota charged,
// placement decision, leader term, trace parent).
func storedWorkload(i int) *meridianv1.Workload {
	extra, err := structpb.NewStruct(map[string]any{
		"priorityClassName": "high", "tolerations": []any{"gpu", "spot"},
		"resources": map[string]any{"shm": "16Gi", "hugepages": 2.0},
	})
	if err != nil {
		panic(err)
	}
	exit := int32(0)
	return &meridianv1.Workload{
		Id:          fmt.Sprintf("wl-01JD3M6Q7ZK4X9V2B8N5T%05d", i),
		Name:        "train-resnet",
		Queue:       "acme/vision/train",
		Priority:    5,
		Preemptible: true,
		ClusterSelector: map[string]string{
			"region": "eu-west-1", "tier": "prod",
		},
		Labels: map[string]string{
			"team": "vision", "project": "resnet", "experiment": "lr-sweep-7", "owner": "alice", "cost-center": "cc-1234",
		},
		PodSets: []*meridianv1.PodSet{
			{Name: "launcher", Replicas: 1, Resources: &meridianv1.Resources{CpuMilli: 2000, MemoryMib: 4096}},
			{Name: "worker", Replicas: 2, MinReplicas: 1, Topology: meridianv1.Topology_TOPOLOGY_NVLINK_DOMAIN,
				Resources: &meridianv1.Resources{GpuMilli: 4000, GpuMemoryMib: 81920, CpuMilli: 32000, MemoryMib: 262144, AcceleratorClass: "nvidia-h100-80gb"}},
		},
		Runtime: &meridianv1.RuntimeTemplate{
			Kind: &meridianv1.RuntimeTemplate_Container{Container: &meridianv1.ContainerTemplate{
				Image: "ghcr.io/acme/train:1.4.2", Command: []string{"python", "-m", "train"}, Args: []string{"--epochs=90", "--lr=0.1"},
				Env: map[string]string{"NCCL_DEBUG": "WARN", "WANDB_PROJECT": "resnet", "OMP_NUM_THREADS": "8"},
			}},
			Extra: extra,
		},
		RequeueOnClusterLoss: true,
		IdempotencyKey:       fmt.Sprintf("sweep-7-%d", i),
		CreateTime:           ts(0),
		SubmittedBy:          "user:alice@acme.example",
		MaxRuntime:           durationpb.New(12 * time.Hour),
		TraceParent:          "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		Status: &meridianv1.WorkloadStatus{
			Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING, Cluster: "eu-1", DispatchId: "d-6f1c2a9be04d7731a0c5e2f1",
			Message: "running on eu-1", ExitCode: &exit, Attempts: 1,
			StartTime: ts(3 * time.Second), DispatchTime: ts(time.Second), UpdateTime: ts(3 * time.Second), AcceptTime: ts(2 * time.Second),
			Conditions: []*meridianv1.Condition{
				{Type: "QuotaReserved", Status: meridianv1.ConditionStatus_CONDITION_STATUS_TRUE, Reason: "Admitted", Message: "8 GPUs of nvidia-h100-80gb within acme/vision", LastTransitionTime: ts(time.Second)},
				{Type: "Dispatched", Status: meridianv1.ConditionStatus_CONDITION_STATUS_TRUE, Reason: "Placed", LastTransitionTime: ts(time.Second)},
				{Type: "Running", Status: meridianv1.ConditionStatus_CONDITION_STATUS_TRUE, Reason: "Started", LastTransitionTime: ts(3 * time.Second)},
			},
			Placement: &meridianv1.PlacementDecision{
				Clusters: []*meridianv1.ClusterScore{
					{Cluster: "eu-1", Score: 4, Detail: "leaves 4 GPUs free", Chosen: true},
					{Cluster: "eu-2", Score: 12, Detail: "leaves 12 GPUs free"},
					{Cluster: "us-1", Score: 28, Detail: "leaves 28 GPUs free"},
				},
				Rule: "tightest fit: leaves 4 GPUs free on eu-1 vs 12 GPUs on eu-2",
			},
			Assignment: []*meridianv1.PodSetAssignment{
				{PodSet: "launcher", Replicas: []*meridianv1.ReplicaAssignment{{Node: "cpu-node-03"}}},
				{PodSet: "worker", Replicas: []*meridianv1.ReplicaAssignment{{Node: "gpu-node-11", Gpus: []int32{0, 1, 2, 3}}, {Node: "gpu-node-12", Gpus: []int32{4, 5, 6, 7}}}},
			},
			QuotaCharge:         []*meridianv1.ClassCharge{{AcceleratorClass: "nvidia-h100-80gb", MilliGpus: 8000}},
			DispatchTerm:        42,
			DispatchTraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01",
		},
	}
}

func sampleNode(i int) *agentv1.Node {
	return &agentv1.Node{
		Name: fmt.Sprintf("gpu-node-%02d", i), Labels: map[string]string{"zone": "a", "rack": "r12", "gpu": "h100"},
		AcceleratorClass: "nvidia-h100-80gb", Rack: "r12", NvlinkDomain: "nvl-3", Schedulable: true,
		CpuMilliFree: 60000, CpuMilliTotal: 128000, MemoryMibFree: 400000, MemoryMibTotal: 1000000,
		Gpus: []*agentv1.Gpu{
			{Index: 0, FreeMilli: 1000, FreeMemoryMib: 81920, TotalMemoryMib: 81920, Healthy: true},
			{Index: 1, FreeMilli: 250, FreeMemoryMib: 10240, TotalMemoryMib: 81920, Healthy: true,
				MigProfiles: []*agentv1.MigSlice{{Profile: "1g.10gb", Free: 2, Total: 7}}},
		},
	}
}

func dispatchOf(i int) *agentv1.Dispatch {
	w := storedWorkload(i)
	return &agentv1.Dispatch{
		DispatchId: w.GetStatus().GetDispatchId(), WorkloadId: w.GetId(), Attempt: 1, Workload: w,
		Placement: []*agentv1.PodSetPlacement{{PodSet: "worker", Nodes: []string{"gpu-node-11", "gpu-node-12"}, Replicas: 2}},
		ClusterId: "eu-1", LeaderTerm: 42, CreatedAt: ts(time.Second),
	}
}

func eventOf(i int) *agentv1.DispatchEvent {
	code := int32(137)
	return &agentv1.DispatchEvent{
		DispatchId: fmt.Sprintf("d-%d", i), WorkloadId: fmt.Sprintf("wl-%d", i), ClusterId: "eu-1",
		Type: agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_FAILED, Reason: "OOMKilled", ExitCode: &code,
		Time: ts(time.Hour), Usage: &agentv1.Usage{GpuMilliSeconds: 10, WallTime: durationpb.New(time.Minute)}, Seq: uint64(i), SessionId: "s-7f3a",
		EventId: fmt.Sprintf("d-%d/5", i), TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}
}
