package agentv1_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// Run `go test ./proto/meridian/agent/v1 -run Golden -rewrite` after an
// intended, compatible change (a new field), and review the diff.
var rewrite = flag.Bool("rewrite", false, "rewrite the golden files in testdata/golden")

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)

func ts(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(t0.Add(d)) }

func exit(c int32) *int32 { return &c }

func sampleWorkload() *meridianv1.Workload {
	return &meridianv1.Workload{
		Id:                   "wl-01JD3M6Q7ZK4X9V2B8N5T0RCWE",
		Name:                 "train",
		Queue:                "acme/vision/train",
		Priority:             5,
		Preemptible:          true,
		ClusterSelector:      map[string]string{"region": "eu-west-1"},
		RequeueOnClusterLoss: true,
		PodSets: []*meridianv1.PodSet{{
			Name: "worker", Replicas: 2, MinReplicas: 1,
			Topology: meridianv1.Topology_TOPOLOGY_NVLINK_DOMAIN,
			Resources: &meridianv1.Resources{
				GpuMilli: 4000, GpuMemoryMib: 81920, CpuMilli: 32000, MemoryMib: 262144,
				AcceleratorClass: "nvidia-h100-80gb",
			},
		}},
		Runtime: &meridianv1.RuntimeTemplate{Kind: &meridianv1.RuntimeTemplate_Container{
			Container: &meridianv1.ContainerTemplate{Image: "ghcr.io/acme/train:1", Args: []string{"--x"}, Env: map[string]string{"A": "1"}},
		}},
	}
}

func sampleNode() *agentv1.Node {
	return &agentv1.Node{
		Name: "gpu-node-01", Labels: map[string]string{"zone": "a"},
		AcceleratorClass: "nvidia-a100-40gb", Rack: "r12", NvlinkDomain: "nvl-3", Schedulable: true,
		CpuMilliFree: 60000, CpuMilliTotal: 128000, MemoryMibFree: 400000, MemoryMibTotal: 1000000,
		Gpus: []*agentv1.Gpu{
			{Index: 0, FreeMilli: 1000, FreeMemoryMib: 40960, TotalMemoryMib: 40960, Healthy: true},
			{Index: 1, FreeMilli: 250, FreeMemoryMib: 10240, TotalMemoryMib: 40960, Healthy: true,
				MigProfiles: []*agentv1.MigSlice{{Profile: "1g.5gb", Free: 2, Total: 7}}},
		},
	}
}

// samples holds one fully populated instance of every message in
// agent.proto, keyed by the golden file name.
func samples() map[string]proto.Message {
	modes := []meridianv1.FractionalMode{meridianv1.FractionalMode_FRACTIONAL_MODE_MIG, meridianv1.FractionalMode_FRACTIONAL_MODE_MPS}
	dispatch := &agentv1.Dispatch{
		DispatchId: "d-01JD3M7", WorkloadId: "wl-01JD3M6Q7ZK4X9V2B8N5T0RCWE", Attempt: 2,
		Workload:  sampleWorkload(),
		Placement: []*agentv1.PodSetPlacement{{PodSet: "worker", Nodes: []string{"gpu-node-01", "gpu-node-02"}}},
		ClusterId: "eu-1", LeaderTerm: 42, CreatedAt: ts(0),
	}
	cancel := &agentv1.DispatchCancel{
		DispatchId: "d-01JD3M7", WorkloadId: "wl-01JD3M6Q7ZK4X9V2B8N5T0RCWE", Reason: "preempted by acme/llm",
		Preempt: true, GracePeriod: durationpb.New(30 * time.Second), ClusterId: "eu-1", SentAt: ts(time.Minute),
	}
	second := proto.Clone(dispatch).(*agentv1.Dispatch)
	second.DispatchId, second.Workload.TraceParent = "d-01JD3M8", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	batch := &agentv1.DispatchBatch{Dispatches: []*agentv1.Dispatch{dispatch, second}}
	return map[string]proto.Message{
		"register": &agentv1.Register{
			ClusterId: "eu-1", ProtocolVersion: agentv1.ProtocolVersion_PROTOCOL_VERSION_1,
			Connector: meridianv1.ConnectorKind_CONNECTOR_KIND_KUBERNETES, AgentVersion: "0.1.0",
			SessionId: "s-7f3a", Labels: map[string]string{"region": "eu-west-1"}, FractionalModes: modes,
			KnownDispatchIds: []string{"d-1", "d-2"}, SentAt: ts(0),
		},
		"register_ack": &agentv1.RegisterAck{
			ClusterId: "eu-1", Accepted: true, Reason: "ok", ProtocolVersion: agentv1.ProtocolVersion_PROTOCOL_VERSION_1,
			HeartbeatInterval: durationpb.New(5 * time.Second), AdvertiseInterval: durationpb.New(time.Minute),
			LostTimeout: durationpb.New(45 * time.Second), CurrentDispatchIds: []string{"d-2"}, HubId: "hub-a", SentAt: ts(time.Second),
			Capabilities: []string{"event-batch"},
		},
		"mig_slice": &agentv1.MigSlice{Profile: "3g.20gb", Free: 1, Total: 2},
		"gpu":       sampleNode().GetGpus()[1],
		"node":      sampleNode(),
		"advertisement": &agentv1.Advertisement{
			ClusterId: "eu-1", Seq: 17, SentAt: ts(2 * time.Second), Connector: meridianv1.ConnectorKind_CONNECTOR_KIND_SLURM,
			Labels: map[string]string{"site": "lyon"}, FractionalModes: modes, Nodes: []*agentv1.Node{sampleNode()}, SessionId: "s-7f3a",
			MigStrategy: agentv1.MigStrategy_MIG_STRATEGY_MIXED, Capabilities: []string{"dispatch-batch"},
		},
		"advertisement_delta": &agentv1.AdvertisementDelta{
			ClusterId: "eu-1", Seq: 18, BaseSeq: 17, SentAt: ts(3 * time.Second),
			UpsertedNodes: []*agentv1.Node{sampleNode()}, RemovedNodes: []string{"gpu-node-09"}, SessionId: "s-7f3a",
		},
		"running_dispatch": &agentv1.RunningDispatch{DispatchId: "d-2", WorkloadId: "wl-2", State: agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_RUNNING},
		"heartbeat": &agentv1.Heartbeat{
			ClusterId: "eu-1", Seq: 99, SentAt: ts(4 * time.Second), AdvertisementSeq: 18, SessionId: "s-7f3a",
			Dispatches: []*agentv1.RunningDispatch{{DispatchId: "d-2", WorkloadId: "wl-2", State: agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_ACCEPTED}},
		},
		"pod_set_placement": &agentv1.PodSetPlacement{PodSet: "worker", Nodes: []string{"n1", "n1", "n2"}, Replicas: 3, MigProfile: "1g.10gb"},
		"dispatch":          dispatch,
		"dispatch_cancel":   cancel,
		"usage":             &agentv1.Usage{GpuMilliSeconds: 3_600_000, CpuMilliSeconds: 7_200_000, WallTime: durationpb.New(time.Hour)},
		"dispatch_event": &agentv1.DispatchEvent{
			DispatchId: "d-01JD3M7", WorkloadId: "wl-01JD3M6Q7ZK4X9V2B8N5T0RCWE", ClusterId: "eu-1",
			Type: agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_FAILED, Reason: "OOMKilled", ExitCode: exit(137),
			Time: ts(time.Hour), Usage: &agentv1.Usage{GpuMilliSeconds: 10}, Seq: 5, SessionId: "s-7f3a", EventId: "d-01JD3M7/5",
			TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		},
		"event_batch": &agentv1.EventBatch{Events: []*agentv1.DispatchEvent{
			{DispatchId: "d-1", WorkloadId: "wl-1", ClusterId: "eu-1", Type: agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_RUNNING, Time: ts(time.Second), Seq: 1, SessionId: "s-7f3a", EventId: "d-1:running"},
			{DispatchId: "d-2", WorkloadId: "wl-2", ClusterId: "eu-1", Type: agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_SUCCEEDED, ExitCode: exit(0), Time: ts(2 * time.Second), Seq: 2, SessionId: "s-7f3a", EventId: "d-2:succeeded"},
		}},
		"hub_message_dispatch": &agentv1.HubMessage{Kind: &agentv1.HubMessage_Dispatch{Dispatch: dispatch}},
		"hub_message_cancel":   &agentv1.HubMessage{Kind: &agentv1.HubMessage_Cancel{Cancel: cancel}},
		"dispatch_batch":       batch,
		"hub_message_batch":    &agentv1.HubMessage{Kind: &agentv1.HubMessage_Batch{Batch: batch}},
	}
}

func TestGoldenWireEncoding(t *testing.T) {
	for name, msg := range samples() {
		t.Run(name, func(t *testing.T) {
			got, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
			if err != nil {
				t.Fatalf("marshal: %v", err)
			}
			path := filepath.Join("testdata", "golden", name+".binpb")
			if *rewrite {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden file (run with -rewrite to create it): %v", err)
			}
			// Old bytes must still mean the same thing...
			decoded := msg.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(want, decoded); err != nil {
				t.Fatalf("golden bytes no longer decode: %v", err)
			}
			if !proto.Equal(decoded, msg) {
				t.Errorf("golden bytes decode to a different message: a field was renumbered, retyped or removed.\n got: %v\nwant: %v", decoded, msg)
			}
			// ...and the encoding must not drift.
			if !bytes.Equal(got, want) {
				t.Errorf("wire encoding of %s changed (%d bytes, golden %d); if intended and compatible, rerun with -rewrite", name, len(got), len(want))
			}
		})
	}
}

// Every message declared in agent.proto needs a golden sample, so a new
// message cannot slip in without one.
func TestGoldenCoversEveryMessage(t *testing.T) {
	covered := map[string]bool{}
	for _, m := range samples() {
		covered[string(m.ProtoReflect().Descriptor().FullName())] = true
	}
	msgs := agentv1.File_meridian_agent_v1_agent_proto.Messages()
	for i := 0; i < msgs.Len(); i++ {
		name := string(msgs.Get(i).FullName())
		if !covered[name] {
			t.Errorf("message %s has no golden sample in samples()", name)
		}
	}
}

// Every field of every sample is set, so the golden files exercise the
// whole schema: an unset field would let a renumbering go unnoticed.
func TestGoldenSamplesSetEveryField(t *testing.T) {
	for name, m := range samples() {
		r := m.ProtoReflect()
		fields := r.Descriptor().Fields()
		for i := 0; i < fields.Len(); i++ {
			f := fields.Get(i)
			if f.ContainingOneof() != nil && !f.ContainingOneof().IsSynthetic() {
				continue // only one member of a real oneof can be set
			}
			if !r.Has(f) {
				t.Errorf("sample %s leaves field %s unset", name, f.Name())
			}
		}
	}
}

// The generated vtprotobuf code (agent_vtproto.pb.go, used through
// internal/protofast) reads the golden bytes as proto does, keeps what
// it does not know, and writes the same bytes (every map in the samples
// has one entry, so map order cannot differ).
func TestGoldenVTProto(t *testing.T) {
	type vt interface {
		proto.Message
		MarshalVT() ([]byte, error)
		UnmarshalVT([]byte) error
	}
	for name, msg := range samples() {
		t.Run(name, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join("testdata", "golden", name+".binpb"))
			if err != nil {
				t.Fatal(err)
			}
			got, err := msg.(vt).MarshalVT()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("MarshalVT writes %d bytes, golden %d:\n% x\n% x", len(got), len(want), got, want)
			}
			// A newer peer's field, appended, survives a decode and an
			// encode.
			newer := append(append([]byte{}, want...), 0xa2, 0x06, 0x03, 'n', 'e', 'w') // field 100, bytes "new"
			decoded := msg.ProtoReflect().New().Interface().(vt)
			if err := decoded.UnmarshalVT(newer); err != nil {
				t.Fatalf("UnmarshalVT: %v", err)
			}
			viaProto := msg.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(newer, viaProto); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(decoded, viaProto) {
				t.Errorf("UnmarshalVT decodes %v, proto %v", decoded, viaProto)
			}
			again, err := decoded.MarshalVT()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again, newer) {
				t.Errorf("re-encoding with MarshalVT lost or moved the unknown field")
			}
		})
	}
}
