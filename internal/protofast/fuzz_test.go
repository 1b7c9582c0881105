package protofast

import (
	"bytes"
	"math"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// fuzzTypes are the messages decoded on the per-workload paths: stored
// workloads, the hub's dispatch messages, the agents' events, adverts.
var fuzzTypes = []proto.Message{
	&meridianv1.Workload{}, &agentv1.HubMessage{}, &agentv1.EventBatch{}, &agentv1.DispatchEvent{},
	&agentv1.Advertisement{}, &agentv1.AdvertisementDelta{}, &agentv1.Heartbeat{}, &meridianv1.WorkloadEvent{},
}

// FuzzUnmarshalMatchesProto: for any bytes, Unmarshal accepts exactly
// what proto.Unmarshal accepts and decodes the same message, and
// MarshalDeterministic then writes proto's deterministic bytes.
func FuzzUnmarshalMatchesProto(f *testing.F) {
	for _, m := range samples() {
		b, _ := det.Marshal(m)
		f.Add(b)
	}
	f.Add([]byte{0x12, 0x02, 'a', 0xff})
	f.Add([]byte{0x10, 0x05})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, typ := range fuzzTypes {
			want := typ.ProtoReflect().New().Interface()
			got := typ.ProtoReflect().New().Interface()
			errWant := proto.Unmarshal(b, want)
			errGot := Unmarshal(b, got)
			if (errWant == nil) != (errGot == nil) {
				t.Fatalf("%T: proto says %v, Unmarshal says %v", typ, errWant, errGot)
			}
			if errWant != nil {
				continue
			}
			// Compare encodings, not proto.Equal, which finds NaN unequal
			// to itself.
			wb, err := det.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			gb, err := det.Marshal(got)
			if err != nil {
				t.Fatalf("%T: the decoded message does not encode: %v", typ, err)
			}
			if !bytes.Equal(wb, gb) {
				t.Fatalf("%T: decoded %v, proto decodes %v", typ, got, want)
			}
			fb, err := MarshalDeterministic(got)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(fb, wb) && !knownDifference(got.ProtoReflect()) {
				t.Fatalf("%T: MarshalDeterministic\n% x\nproto\n% x", typ, fb, wb)
			}
		}
	})
}

// knownDifference reports what MarshalDeterministic is documented to
// write differently: a float or double field without presence that
// holds -0 (proto writes it, vtprotobuf omits it), and unknown fields
// inside a google.protobuf message (vtprotobuf's wrappers drop them).
func knownDifference(m protoreflect.Message) bool {
	if m.Descriptor().ParentFile().Package() == "google.protobuf" && len(m.GetUnknown()) > 0 {
		return true
	}
	found := false
	isNegZero := func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch fd.Kind() {
		case protoreflect.DoubleKind, protoreflect.FloatKind:
			f := v.Float()
			return f == 0 && math.Signbit(f)
		}
		return false
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				if fd.Message() != nil && knownDifference(l.Get(i).Message()) {
					found = true
				}
			}
		case fd.IsMap():
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				if fd.MapValue().Message() != nil && knownDifference(mv.Message()) {
					found = true
				}
				return !found
			})
		case fd.Message() != nil:
			found = knownDifference(v.Message())
		default:
			found = !fd.HasPresence() && isNegZero(fd, v)
		}
		return !found
	})
	return found
}
