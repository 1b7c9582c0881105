package protofast

import (
	"testing"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// BenchmarkWorkload decodes, encodes and clones a running workload as the
// hub stores it (storedWorkload: labels, selector, two pod sets, a
// container template with an extra struct, conditions, timestamps and
// the folded dispatch record; about 1.2 KB), each with proto beside this
// package, in the same process. vt-only is the generated UnmarshalVT
// without the scan that makes it answer as proto does; scan-only is that
// scan.
func BenchmarkWorkload(b *testing.B) {
	w := storedWorkload(1)
	rec, err := det.Marshal(w)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("stored workload: %d bytes", len(rec))
	bench := func(name string, f func() error) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(rec)))
			for b.Loop() {
				if err := f(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	bench("decode/proto", func() error { return proto.Unmarshal(rec, &meridianv1.Workload{}) })
	bench("decode/protofast", func() error { return Unmarshal(rec, &meridianv1.Workload{}) })
	bench("decode/vt-only", func() error { return (&meridianv1.Workload{}).UnmarshalVT(rec) })
	t := tableOf(w.ProtoReflect().Descriptor())
	bench("decode/scan-only", func() error {
		if !t.check(rec, 1) {
			b.Fatal("the scan refuses the record")
		}
		return nil
	})
	bench("encode-deterministic/proto", func() error { _, err := det.Marshal(w); return err })
	bench("encode-deterministic/protofast", func() error { _, err := MarshalDeterministic(w); return err })
	bench("encode/proto", func() error { _, err := proto.Marshal(w); return err })
	bench("encode/protofast", func() error { _, err := Marshal(w); return err })
	bench("clone/proto", func() error { _ = proto.Clone(w).(*meridianv1.Workload); return nil })
	bench("clone/protofast", func() error { _ = Clone(w); return nil })
}

// BenchmarkAgentMessages decodes what travels over NATS per workload: a
// dispatch batch of 16 (the hub's message to an agent) and an event
// batch of 32 (an agent's publish round).
func BenchmarkAgentMessages(b *testing.B) {
	batch := &agentv1.DispatchBatch{}
	for i := range 16 {
		batch.Dispatches = append(batch.Dispatches, dispatchOf(i))
	}
	hub, _ := det.Marshal(&agentv1.HubMessage{Kind: &agentv1.HubMessage_Batch{Batch: batch}})
	events := &agentv1.EventBatch{}
	for i := range 32 {
		events.Events = append(events.Events, eventOf(i))
	}
	ev, _ := det.Marshal(events)
	for _, c := range []struct {
		name string
		b    []byte
		new  func() proto.Message
	}{
		{"hub-message-16", hub, func() proto.Message { return &agentv1.HubMessage{} }},
		{"event-batch-32", ev, func() proto.Message { return &agentv1.EventBatch{} }},
	} {
		b.Run(c.name+"/proto", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.b)))
			for b.Loop() {
				if err := proto.Unmarshal(c.b, c.new()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/protofast", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.b)))
			for b.Loop() {
				if err := Unmarshal(c.b, c.new()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
