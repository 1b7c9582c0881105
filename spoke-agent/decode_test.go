package agent

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

func mustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeHubMessage(t *testing.T) {
	disp := &agentv1.Dispatch{DispatchId: "d-1", WorkloadId: "wl-1", Attempt: 2, ClusterId: "c",
		Workload:  &meridianv1.Workload{Id: "wl-1", PodSets: []*meridianv1.PodSet{{Name: "main", Replicas: 1}}},
		Placement: []*agentv1.PodSetPlacement{{PodSet: "main", Nodes: []string{"n1"}}}, LeaderTerm: 7, CreatedAt: timestamppb.Now()}
	canc := &agentv1.DispatchCancel{DispatchId: "d-1", WorkloadId: "wl-1", Reason: "user asked", Preempt: true, ClusterId: "c",
		GracePeriod: durationpb.New(30e9), SentAt: timestamppb.Now()}
	bareCancelNoReason := &agentv1.DispatchCancel{DispatchId: "d-2", WorkloadId: "wl-2", SentAt: timestamppb.Now()}
	tests := map[string]struct {
		msgID      string
		payload    []byte
		wantCancel bool
		wantID     string
		wantErr    bool
	}{
		"envelope dispatch": {msgID: "d-1", payload: mustMarshal(t, &agentv1.HubMessage{Kind: &agentv1.HubMessage_Dispatch{Dispatch: disp}}), wantID: "d-1"},
		"envelope cancel": {msgID: "d-1/cancel", payload: mustMarshal(t, &agentv1.HubMessage{Kind: &agentv1.HubMessage_Cancel{Cancel: canc}}),
			wantCancel: true, wantID: "d-1"},
		"envelope cancel, plain id": {msgID: "x", payload: mustMarshal(t, &agentv1.HubMessage{Kind: &agentv1.HubMessage_Cancel{Cancel: canc}}),
			wantCancel: true, wantID: "d-1"},
		"bare dispatch":                  {msgID: "d-1", payload: mustMarshal(t, disp), wantID: "d-1"},
		"bare cancel, cancel: prefix":    {msgID: "cancel:d-1", payload: mustMarshal(t, canc), wantCancel: true, wantID: "d-1"},
		"bare cancel, /cancel suffix":    {msgID: "d-1/cancel", payload: mustMarshal(t, canc), wantCancel: true, wantID: "d-1"},
		"bare cancel, plain id":          {msgID: "d-1", payload: mustMarshal(t, canc), wantCancel: true, wantID: "d-1"},
		"bare cancel without reason":     {msgID: "cancel:d-2", payload: mustMarshal(t, bareCancelNoReason), wantCancel: true, wantID: "d-2"},
		"dispatch without id":            {msgID: "x", payload: mustMarshal(t, &agentv1.Dispatch{WorkloadId: "w"}), wantErr: true},
		"cancel id with a dispatch body": {msgID: "cancel:d-1", payload: mustMarshal(t, &agentv1.Dispatch{WorkloadId: "w"}), wantErr: true},
		"garbage":                        {msgID: "x", payload: []byte{0xff, 0xff, 0xff}, wantErr: true},
		"empty batch":                    {msgID: "batch:x", payload: mustMarshal(t, &agentv1.HubMessage{Kind: &agentv1.HubMessage_Batch{Batch: &agentv1.DispatchBatch{}}}), wantErr: true},
		"truncated envelope":             {msgID: "d-1", payload: mustMarshal(t, &agentv1.HubMessage{Kind: &agentv1.HubMessage_Dispatch{Dispatch: disp}})[:20], wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			hm, err := DecodeHubMessage(tc.msgID, tc.payload)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("decoded %v, want an error", hm)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantCancel {
				if hm.GetCancel().GetDispatchId() != tc.wantID {
					t.Fatalf("want a cancel of %s, got %v", tc.wantID, hm)
				}
				return
			}
			got := hm.GetDispatch()
			if got == nil || got.GetDispatchId() != tc.wantID {
				t.Fatalf("want a dispatch %s, got %v", tc.wantID, hm)
			}
			if !proto.Equal(got, disp) {
				t.Errorf("dispatch changed in decoding:\n got %v\nwant %v", got, disp)
			}
		})
	}
}

// TestDecodeBatch: a batch decodes whole, each dispatch as it was sent.
func TestDecodeBatch(t *testing.T) {
	a := &agentv1.Dispatch{DispatchId: "d-1", WorkloadId: "wl-1", Workload: &meridianv1.Workload{Id: "wl-1", TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	b := &agentv1.Dispatch{DispatchId: "d-2", WorkloadId: "wl-2", Workload: &meridianv1.Workload{Id: "wl-2"}}
	in := &agentv1.HubMessage{Kind: &agentv1.HubMessage_Batch{Batch: &agentv1.DispatchBatch{Dispatches: []*agentv1.Dispatch{a, b}}}}
	hm, err := DecodeHubMessage("batch:d-1:2:00", mustMarshal(t, in))
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(hm, in) {
		t.Fatalf("decoded %v, want %v", hm, in)
	}
}

func FuzzDecodeHubMessage(f *testing.F) {
	d := &agentv1.Dispatch{DispatchId: "d", Workload: &meridianv1.Workload{Id: "w"}}
	f.Add("d", mustMarshal(f, &agentv1.HubMessage{Kind: &agentv1.HubMessage_Dispatch{Dispatch: d}}))
	f.Add("d", mustMarshal(f, d))
	f.Add("cancel:d", mustMarshal(f, &agentv1.DispatchCancel{DispatchId: "d", Reason: "r"}))
	f.Add("batch:d", mustMarshal(f, &agentv1.HubMessage{Kind: &agentv1.HubMessage_Batch{Batch: &agentv1.DispatchBatch{Dispatches: []*agentv1.Dispatch{d, d}}}}))
	f.Fuzz(func(t *testing.T, msgID string, payload []byte) {
		hm, err := DecodeHubMessage(msgID, payload)
		if err != nil {
			return
		}
		if hm.GetDispatch() != nil && hm.GetDispatch().GetDispatchId() == "" {
			t.Fatal("decoded a dispatch without an id")
		}
		if hm.GetCancel() != nil && hm.GetCancel().GetDispatchId() == "" {
			t.Fatal("decoded a cancel without an id")
		}
		if hm.GetBatch() != nil && len(hm.GetBatch().GetDispatches()) == 0 {
			t.Fatal("decoded an empty batch")
		}
	})
}
