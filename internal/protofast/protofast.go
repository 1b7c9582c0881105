package protofast

import (
	"google.golang.org/protobuf/proto"
)

// The methods vtprotobuf generates (features marshal, unmarshal, size,
// clone).
type (
	vtUnmarshaler interface {
		UnmarshalVT([]byte) error
	}
	vtMarshaler interface {
		SizeVT() int
		MarshalToSizedBufferVT([]byte) (int, error)
	}
	vtCloner interface {
		CloneMessageVT() proto.Message
	}
)

// Unmarshal is proto.Unmarshal: it resets m and decodes b into it,
// keeping unknown fields. It does not keep b.
func Unmarshal(b []byte, m proto.Message) error {
	vt, ok := m.(vtUnmarshaler)
	if !ok {
		return proto.Unmarshal(b, m)
	}
	t := tableOf(m.ProtoReflect().Descriptor())
	if !t.ok || !t.check(b, 1) {
		return proto.Unmarshal(b, m)
	}
	proto.Reset(m)
	if err := vt.UnmarshalVT(b); err != nil {
		// UnmarshalVT refuses a few encodings proto accepts (a known
		// field with another wire type is an unknown field to proto).
		return proto.Unmarshal(b, m)
	}
	return nil
}

// Marshal is proto.Marshal (not deterministic: map entries come in Go's
// map order).
func Marshal(m proto.Message) ([]byte, error) {
	if b, _, ok := marshalVT(m); ok {
		return b, nil
	}
	return proto.Marshal(m)
}

// MarshalDeterministic is proto.MarshalOptions{Deterministic: true}.Marshal:
// equal messages give equal bytes (map entries sorted by key), and the
// bytes are the ones proto writes, but for a negative zero in a float or
// double field without presence, which proto writes and this omits.
func MarshalDeterministic(m proto.Message) ([]byte, error) {
	if b, t, ok := marshalVT(m); ok && t.sortMaps(b) {
		return b, nil
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

// marshalVT encodes m with its generated code when it has one and the
// result is what proto would have written: false leaves it to proto
// (no generated code, a field the scan does not handle, or a string that
// is not UTF-8, which proto refuses with an error).
func marshalVT(m proto.Message) ([]byte, *table, bool) {
	vt, t, ok := vtEncoder(m)
	if !ok {
		return nil, nil, false
	}
	b := make([]byte, vt.SizeVT())
	if !encodeVT(vt, t, b) {
		return nil, nil, false
	}
	return b, t, true
}

// vtEncoder returns m's generated encoder and its scan table, or false
// when m has no generated code or a field the scan does not handle.
func vtEncoder(m proto.Message) (vtMarshaler, *table, bool) {
	vt, ok := m.(vtMarshaler)
	if !ok || m == nil {
		return nil, nil, false
	}
	t := tableOf(m.ProtoReflect().Descriptor())
	return vt, t, t.ok
}

// encodeVT writes vt into b, which is exactly its SizeVT long, and
// reports whether the bytes are what proto would have written (false:
// leave it to proto).
func encodeVT(vt vtMarshaler, t *table, b []byte) bool {
	n, err := vt.MarshalToSizedBufferVT(b)
	return err == nil && n == len(b) && t.check(b, 1)
}

// Clone is proto.Clone: a deep copy, unknown fields included.
func Clone[M proto.Message](m M) M {
	if c, ok := any(m).(vtCloner); ok {
		return c.CloneMessageVT().(M)
	}
	return proto.Clone(m).(M)
}
