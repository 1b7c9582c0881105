package records

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// The basic view of a workload (WORKLOAD_VIEW_BASIC): what identifies it
// and where it stands, without what it asks for (pod sets, runtime,
// selectors) and the record of how it was placed (conditions, placement
// decision, assignment, quota charge). A client that follows many
// workloads' progress receives a fraction of the bytes and decodes a
// fraction of the objects. BasicOf and BasicWorkload keep the same fields
// (a test holds their results equal, byte for byte).
var (
	basicWorkloadFields = fieldSet((&meridianv1.Workload{}).ProtoReflect().Descriptor(),
		"id", "name", "queue", "priority", "labels", "create_time", "submitted_by")
	basicStatusFields = fieldSet((&meridianv1.WorkloadStatus{}).ProtoReflect().Descriptor(),
		"phase", "cluster", "dispatch_id", "pending_reason", "message", "exit_code", "attempts",
		"start_time", "end_time", "dispatch_time", "update_time", "pending_reason_code", "accept_time")
	workloadStatusField = (&meridianv1.Workload{}).ProtoReflect().Descriptor().Fields().ByName("status").Number()
)

// fieldSet maps the numbers of the named fields of d to the wire type
// each is encoded with; it panics on a name d does not have, so a renamed
// field fails every test at once. A field that arrives with another wire
// type is an unknown field to proto's decoder, which the view leaves out.
func fieldSet(d protoreflect.MessageDescriptor, names ...protoreflect.Name) *fieldTypes {
	var set fieldTypes
	for i := range set {
		set[i] = -1
	}
	for _, n := range names {
		f := d.Fields().ByName(n)
		if f == nil {
			panic(fmt.Sprintf("records: %s has no field %q", d.FullName(), n))
		}
		if int(f.Number()) >= len(set) {
			panic(fmt.Sprintf("records: %s is field %d; the view's table stops at %d", f.FullName(), f.Number(), len(set)-1))
		}
		set[f.Number()] = int8(wireType(f))
	}
	return &set
}

// fieldTypes is a field set indexed by field number: the wire type of a
// kept field, -1 for the others. A table, not a map: the cut looks up
// every field of every workload it sends.
type fieldTypes [32]int8

// has says whether field num is in the set.
func (s *fieldTypes) has(num protowire.Number) bool {
	return num >= 0 && int(num) < len(s) && s[num] >= 0
}

// wireType is how fd's values are encoded (the view keeps no repeated
// scalars, so packing does not arise).
func wireType(fd protoreflect.FieldDescriptor) protowire.Type {
	switch fd.Kind() {
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.MessageKind, protoreflect.GroupKind:
		return protowire.BytesType
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	}
	return protowire.VarintType
}

// keeps says whether a field numbered num of wire type typ is in set.
func keeps(set *fieldTypes, num protowire.Number, typ protowire.Type) bool {
	return set.has(num) && set[num] == int8(typ)
}

// BasicOf is w in the basic view: a new message that shares w's strings,
// maps and timestamps (treat it as read-only, as w). nil for nil.
func BasicOf(w *meridianv1.Workload) *meridianv1.Workload {
	if w == nil {
		return nil
	}
	b := &meridianv1.Workload{Id: w.Id, Name: w.Name, Queue: w.Queue, Priority: w.Priority, Labels: w.Labels,
		CreateTime: w.CreateTime, SubmittedBy: w.SubmittedBy}
	if st := w.Status; st != nil {
		b.Status = &meridianv1.WorkloadStatus{Phase: st.Phase, Cluster: st.Cluster, DispatchId: st.DispatchId,
			PendingReason: st.PendingReason, Message: st.Message, ExitCode: st.ExitCode, Attempts: st.Attempts,
			StartTime: st.StartTime, EndTime: st.EndTime, DispatchTime: st.DispatchTime, UpdateTime: st.UpdateTime,
			PendingReasonCode: st.PendingReasonCode, AcceptTime: st.AcceptTime}
	}
	return b
}

// BasicWorkload is a stored workload's encoding in the basic view, cut
// from the encoding itself without decoding it: the kept fields are
// copied as they are, in their order, so the deterministic encoding of a
// workload gives the deterministic encoding of its basic view. For any
// bytes that decode to a workload, the result decodes to BasicOf of that
// workload (FuzzBasicWorkload). It fails on malformed input.
func BasicWorkload(b []byte) ([]byte, error) {
	out := make([]byte, 0, len(b)/2)
	err := eachField(b, func(num protowire.Number, typ protowire.Type, field, body []byte) error {
		switch {
		case keeps(basicWorkloadFields, num, typ):
			out = append(out, field...)
		case num == workloadStatusField && typ == protowire.BytesType:
			value, _ := protowire.ConsumeBytes(body)
			st := make([]byte, 0, len(value))
			if err := eachField(value, func(num protowire.Number, typ protowire.Type, field, _ []byte) error {
				if keeps(basicStatusFields, num, typ) {
					st = append(st, field...)
				}
				return nil
			}); err != nil {
				return err
			}
			out = protowire.AppendTag(out, num, protowire.BytesType)
			out = protowire.AppendBytes(out, st)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// eachField calls fn for every field of one message's encoding with the
// whole field (tag and value) and its value as encoded after the tag; it
// fails on malformed input.
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, field, body []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %v", errSummary, protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return fmt.Errorf("%w: field %d: %v", errSummary, num, protowire.ParseError(m))
		}
		if err := fn(num, typ, b[:n+m], b[n:n+m]); err != nil {
			return err
		}
		b = b[n+m:]
	}
	return nil
}
