package dispatch

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// fillEveryField sets each field of m to something other than its default,
// and those of the messages under it down to depth levels: a field added
// to the message later is filled too, so a hand-written copy that forgets
// it fails the comparison.
func fillEveryField(m protoreflect.Message, depth int) {
	fill := func(v protoreflect.Value) protoreflect.Value {
		if depth > 0 {
			fillEveryField(v.Message(), depth-1)
		}
		return v
	}
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			var v protoreflect.Value
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				v = fill(mp.NewValue())
			} else {
				v = scalarOf(fd.MapValue())
			}
			mp.Set(scalarOf(fd.MapKey()).MapKey(), v)
		case fd.IsList():
			l := m.Mutable(fd).List()
			if fd.Kind() == protoreflect.MessageKind {
				l.Append(fill(l.NewElement()))
			} else {
				l.Append(scalarOf(fd))
			}
		case fd.Kind() == protoreflect.MessageKind:
			m.Set(fd, fill(m.NewField(fd)))
		default:
			m.Set(fd, scalarOf(fd))
		}
	}
}

func scalarOf(fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("x-" + string(fd.Name()))
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(7)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(7)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(7)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(7)
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(1)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(7)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(7)
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte("x"))
	}
	panic("unhandled kind " + fd.Kind().String())
}

// TestDispatchSpecCarriesEveryField: a dispatch carries the whole workload
// but its status and trace parent, and leaves the stored workload as it was.
func TestDispatchSpecCarriesEveryField(t *testing.T) {
	w := &meridianv1.Workload{}
	fillEveryField(w.ProtoReflect(), 0)
	before := proto.Clone(w)

	got := dispatchSpec(w)

	want := proto.Clone(w).(*meridianv1.Workload)
	want.Status, want.TraceParent = nil, ""
	if !proto.Equal(got, want) {
		t.Fatalf("dispatch spec differs from the workload without status and trace parent:\n got %v\nwant %v", got, want)
	}
	if got.Status != nil || got.TraceParent != "" {
		t.Fatalf("dispatch spec kept status %v / trace parent %q", got.Status, got.TraceParent)
	}
	got.TraceParent = "00-set-on-the-message"
	if !proto.Equal(w, before) {
		t.Fatal("building or changing the dispatch spec changed the stored workload")
	}
}
