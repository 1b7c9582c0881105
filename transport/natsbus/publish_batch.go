package natsbus

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/meridian-gpu/meridian/internal/telemetry"
)

// MaxPublishBatch bounds one PublishEvents call, well under the client's
// limit of outstanding async publishes.
const MaxPublishBatch = 512

// Event is one message for PublishEvents: its Nats-Msg-Id and payload.
type Event struct {
	MsgID   string
	Payload []byte
	// Trace is the span context the event continues (the dispatch's, on
	// the agent); the zero value carries none.
	Trace trace.SpanContext
}

// PublishEvents stores events of cluster on the EVENTS stream with one
// round trip for the whole batch instead of one per event: every publish
// is sent before any ack is awaited. The result has one entry per event,
// nil when it was stored (or was a duplicate of an id already stored).
//
// Events leave in order on one connection, so the stream stores them in
// order. An event whose publish failed may be stored after a later one
// when the caller retries it; readers rely on the dispatch's state order,
// not on stream order, for that rare case.
func (b *Bus) PublishEvents(ctx context.Context, cluster string, events []Event) []error {
	subj, err := EventsSubject(cluster)
	msgs := make([]outMsg, len(events))
	for i, ev := range events {
		msgs[i] = outMsg{subj: subj, err: err, id: ev.MsgID, data: ev.Payload, trace: ev.Trace}
	}
	errs, _ := b.publishBatch(ctx, msgs)
	return errs
}

// Dispatch is one message for PublishDispatches.
type Dispatch struct {
	Cluster string
	MsgID   string
	Payload []byte
	// Trace is the span context the dispatch continues (the one stored
	// with its record); the zero value carries none.
	Trace trace.SpanContext
}

// PublishDispatches stores dispatches (for any clusters) on the DISPATCH
// stream, one round trip for the batch, like PublishEvents. A dispatch
// whose id the stream has already stored is not stored twice: its error is
// nil and dup[i] is true.
func (b *Bus) PublishDispatches(ctx context.Context, ds []Dispatch) (errs []error, dup []bool) {
	msgs := make([]outMsg, len(ds))
	for i, d := range ds {
		subj, err := DispatchSubject(d.Cluster)
		msgs[i] = outMsg{subj: subj, err: err, id: d.MsgID, data: d.Payload, trace: d.Trace}
	}
	return b.publishBatch(ctx, msgs)
}

type outMsg struct {
	subj  string
	err   error // the subject could not be made
	id    string
	data  []byte
	trace trace.SpanContext
}

// publishBatch sends every message with an async publish, then waits for
// all the acks; dup[i] says the stream already had message i's id.
func (b *Bus) publishBatch(ctx context.Context, msgs []outMsg) (errs []error, dup []bool) {
	errs, dup = make([]error, len(msgs)), make([]bool, len(msgs))
	if len(msgs) > MaxPublishBatch {
		err := fmt.Errorf("natsbus: %d messages in one batch, at most %d", len(msgs), MaxPublishBatch)
		for i := range errs {
			errs[i] = err
		}
		return errs, dup
	}
	futures := make([]jetstream.PubAckFuture, len(msgs))
	var spans []trace.Span // made only when a message carries a trace
	for i, m := range msgs {
		if m.err != nil {
			errs[i] = m.err
			continue
		}
		if err := validateMsgID(m.id); err != nil {
			errs[i] = err
			continue
		}
		var hdr nats.Header
		if m.trace.IsValid() {
			if spans == nil {
				spans = make([]trace.Span, len(msgs))
			}
			spans[i], hdr = b.startSend(ctx, m.trace, m.subj, m.id)
		}
		f, err := b.js.PublishMsgAsync(&nats.Msg{Subject: m.subj, Data: m.data, Header: hdr}, jetstream.WithMsgID(m.id))
		if err != nil {
			errs[i] = fmt.Errorf("natsbus: publish %s id %s: %w", m.subj, m.id, err)
			continue
		}
		futures[i] = f
	}
	if spans != nil {
		defer func() {
			for i, s := range spans {
				if s != nil {
					telemetry.Fail(s, errs[i])
					s.End()
				}
			}
		}()
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case ack := <-f.Ok():
			dup[i] = ack != nil && ack.Duplicate
		case err := <-f.Err():
			errs[i] = fmt.Errorf("natsbus: publish %s id %s: %w", msgs[i].subj, msgs[i].id, err)
		case <-ctx.Done():
			errs[i] = fmt.Errorf("natsbus: publish %s id %s: %w", msgs[i].subj, msgs[i].id, errors.Join(ctx.Err(), errors.New("no ack yet")))
		}
	}
	return errs, dup
}
