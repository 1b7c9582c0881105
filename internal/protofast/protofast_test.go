package protofast

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

var det = proto.MarshalOptions{Deterministic: true}

// samples are messages of the per-workload paths, as they are built.
func samples() map[string]proto.Message {
	return map[string]proto.Message{
		"workload":       storedWorkload(1),
		"empty workload": &meridianv1.Workload{},
		"hub message batch": &agentv1.HubMessage{Kind: &agentv1.HubMessage_Batch{Batch: &agentv1.DispatchBatch{
			Dispatches: []*agentv1.Dispatch{dispatchOf(1), dispatchOf(2)}}}},
		"hub message dispatch": &agentv1.HubMessage{Kind: &agentv1.HubMessage_Dispatch{Dispatch: dispatchOf(3)}},
		"event batch":          &agentv1.EventBatch{Events: []*agentv1.DispatchEvent{eventOf(1), eventOf(2)}},
		"advertisement": &agentv1.Advertisement{ClusterId: "eu-1", Seq: 17, SentAt: ts(0), Labels: map[string]string{"site": "lyon", "tier": "prod"},
			Nodes: []*agentv1.Node{sampleNode(1), sampleNode(2), sampleNode(3)}, Capabilities: []string{agentv1.CapabilityDispatchBatch}},
		// A oneof holding a nil message is an empty message on the wire
		// (vtprotobuf issue 61).
		"oneof with nil message": &meridianv1.RuntimeTemplate{Kind: &meridianv1.RuntimeTemplate_Container{}},
		// Map entries with empty keys and values, and a nil struct value.
		"empty map entries": &meridianv1.Workload{Labels: map[string]string{"": "", "a": ""},
			Runtime: &meridianv1.RuntimeTemplate{Extra: &structpb.Struct{Fields: map[string]*structpb.Value{"z": nil, "y": structpb.NewNullValue()}}}},
	}
}

func TestUnmarshalMatchesProto(t *testing.T) {
	for name, m := range samples() {
		b, err := det.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got := m.ProtoReflect().New().Interface()
		if err := Unmarshal(b, got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := m.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(b, want); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, want) {
			t.Errorf("%s: decoded %v, proto decodes %v", name, got, want)
		}
	}
}

// MarshalDeterministic writes proto's deterministic bytes, whatever order
// Go's maps give their entries in (each run draws a new one).
func TestMarshalDeterministicIsProtos(t *testing.T) {
	for name, m := range samples() {
		want, err := det.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		for range 20 {
			got, err := MarshalDeterministic(m)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: %d bytes differ from proto's deterministic %d:\n% x\n% x", name, len(got), len(want), got, want)
			}
		}
		got, err := Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		back := m.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(got, back); err != nil || !proto.Equal(back, m) {
			t.Errorf("%s: Marshal's bytes decode to %v (%v)", name, back, err)
		}
	}
}

// Integer map keys sort as proto sorts them (signed keys numerically).
// The schema has only string keys, so compareEntries is checked directly.
func TestCompareEntries(t *testing.T) {
	minus5 := int64(-5)
	neg := mapEntry{signed: true, num64: uint64(minus5)}
	pos := mapEntry{signed: true, num64: 3}
	if compareEntries(neg, pos) >= 0 {
		t.Error("signed keys: -5 must sort before 3")
	}
	big := mapEntry{num64: math.MaxUint64}
	small := mapEntry{num64: 1}
	if compareEntries(small, big) >= 0 {
		t.Error("unsigned keys: 1 must sort before 2^64-1")
	}
	if compareEntries(mapEntry{str: []byte("a")}, mapEntry{str: []byte("b")}) >= 0 ||
		compareEntries(mapEntry{str: []byte("")}, mapEntry{str: []byte("a")}) >= 0 {
		t.Error("string keys sort bytewise")
	}
}

// Fields this build does not know (a newer writer's) survive a decode and
// an encode, at the top and inside nested messages, as with proto.
func TestUnknownFieldsKept(t *testing.T) {
	w := storedWorkload(1)
	w.Status.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 901, protowire.VarintType), 7))
	b, err := det.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	b = protowire.AppendTag(b, 900, protowire.BytesType)
	b = protowire.AppendString(b, "from a newer hub")
	got := &meridianv1.Workload{}
	if err := Unmarshal(b, got); err != nil {
		t.Fatal(err)
	}
	if len(got.ProtoReflect().GetUnknown()) == 0 || len(got.GetStatus().ProtoReflect().GetUnknown()) == 0 {
		t.Fatal("unknown fields dropped")
	}
	want := &meridianv1.Workload{}
	_ = proto.Unmarshal(b, want)
	if !proto.Equal(got, want) {
		t.Fatal("decode differs from proto's")
	}
	for _, enc := range []func(proto.Message) ([]byte, error){Marshal, MarshalDeterministic} {
		out, err := enc(got)
		if err != nil {
			t.Fatal(err)
		}
		back := &meridianv1.Workload{}
		if err := proto.Unmarshal(out, back); err != nil || !proto.Equal(back, want) {
			t.Fatalf("re-encoding lost the unknown fields: %v", err)
		}
	}
	if out, _ := MarshalDeterministic(got); !bytes.Equal(out, mustDet(t, want)) {
		t.Fatal("re-encoding differs from proto's")
	}
	c := Clone(got)
	if !proto.Equal(c, want) || !bytes.Equal(c.GetStatus().ProtoReflect().GetUnknown(), want.GetStatus().ProtoReflect().GetUnknown()) {
		t.Fatal("Clone dropped unknown fields")
	}
}

func mustDet(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := det.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The gaps UnmarshalVT and MarshalVT have, closed: proto's answer stands.
func TestProtoAnswersWhereVTDiffers(t *testing.T) {
	nameField := protowire.Number(2) // Workload.name
	t.Run("invalid UTF-8 in a string", func(t *testing.T) {
		b := protowire.AppendBytes(protowire.AppendTag(nil, nameField, protowire.BytesType), []byte{'a', 0xff})
		if err := Unmarshal(b, &meridianv1.Workload{}); err == nil {
			t.Fatal("decoded a string proto refuses")
		}
		// Inside a map value, two levels down.
		w := &meridianv1.Workload{Runtime: &meridianv1.RuntimeTemplate{Kind: &meridianv1.RuntimeTemplate_Container{
			Container: &meridianv1.ContainerTemplate{Env: map[string]string{"K": "\xff"}}}}}
		if _, err := Marshal(w); err == nil {
			t.Fatal("encoded a string proto refuses")
		}
		if _, err := MarshalDeterministic(w); err == nil {
			t.Fatal("encoded a string proto refuses")
		}
		raw, _ := proto.MarshalOptions{}.Marshal(&meridianv1.Workload{Name: "x"})
		raw = append(raw, protowire.AppendBytes(protowire.AppendTag(nil, 8, protowire.BytesType),
			protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType),
				protowire.AppendBytes(protowire.AppendTag(nil, 4, protowire.BytesType),
					protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{0xc3}))))...)
		if err := Unmarshal(raw, &meridianv1.Workload{}); err == nil {
			t.Fatal("decoded an env key proto refuses")
		}
	})
	t.Run("known field with another wire type is unknown", func(t *testing.T) {
		b := protowire.AppendVarint(protowire.AppendTag(nil, nameField, protowire.VarintType), 5)
		got, want := &meridianv1.Workload{}, &meridianv1.Workload{}
		if err := proto.Unmarshal(b, want); err != nil {
			t.Fatal(err)
		}
		if err := Unmarshal(b, got); err != nil || !proto.Equal(got, want) || !bytes.Equal(got.ProtoReflect().GetUnknown(), b) {
			t.Fatalf("got %v, %v", got, err)
		}
	})
	t.Run("nesting deeper than proto's limit", func(t *testing.T) {
		// runtime.extra: a Struct whose field "a" holds a Struct, 10,001
		// deep, written from the inside out at the end of one buffer.
		buf := make([]byte, 16*10001)
		i := len(buf)
		prepend := func(p ...byte) { i -= len(p); copy(buf[i:], p) }
		prependLen := func(end int, tag byte) {
			prepend(protowire.AppendVarint(nil, uint64(end-i))...)
			prepend(tag)
		}
		for range 10001 {
			end := len(buf)
			prependLen(end, 0x2a) // Value.struct_value
			prependLen(end, 0x12) // entry value
			prepend(0x0a, 1, 'a') // entry key
			prependLen(end, 0x0a) // Struct.fields
		}
		inner := buf[i:]
		rt := protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), inner)
		b := protowire.AppendBytes(protowire.AppendTag(nil, 8, protowire.BytesType), rt)
		err := Unmarshal(b, &meridianv1.Workload{})
		if err == nil || !strings.Contains(err.Error(), "depth") {
			t.Fatalf("got %v, want proto's recursion limit", err)
		}
	})
	t.Run("state of the message before", func(t *testing.T) {
		m := storedWorkload(1)
		b := mustDet(t, &meridianv1.Workload{Name: "fresh"})
		if err := Unmarshal(b, m); err != nil || !proto.Equal(m, &meridianv1.Workload{Name: "fresh"}) {
			t.Fatalf("Unmarshal must reset the message as proto.Unmarshal does: %v", m)
		}
	})
	t.Run("no generated code", func(t *testing.T) {
		b, err := MarshalDeterministic(&structpb.Struct{Fields: map[string]*structpb.Value{"b": structpb.NewBoolValue(true), "a": structpb.NewNumberValue(1)}})
		if err != nil {
			t.Fatal(err)
		}
		var s structpb.Struct
		if err := Unmarshal(b, &s); err != nil || len(s.Fields) != 2 {
			t.Fatalf("%v %v", &s, err)
		}
		if _, err := Marshal(&emptypb.Empty{}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestClone(t *testing.T) {
	w := storedWorkload(1)
	c := Clone(w)
	if !proto.Equal(c, w) {
		t.Fatal("clone differs")
	}
	c.Labels["team"] = "other"
	c.Status.Conditions[0].Reason = "changed"
	if w.Labels["team"] != "vision" || w.Status.Conditions[0].Reason != "Admitted" {
		t.Fatal("clone shares state with the original")
	}
	var nilW *meridianv1.Workload
	if Clone(nilW) != nil {
		t.Fatal("Clone(nil) is not nil")
	}
	s := &structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewStringValue("x")}}
	if !proto.Equal(Clone(s), s) {
		t.Fatal("proto fallback")
	}
}
