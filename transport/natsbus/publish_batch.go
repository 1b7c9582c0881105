package natsbus

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MaxPublishBatch bounds one PublishEvents call, well under the client's
// limit of outstanding async publishes.
const MaxPublishBatch = 512

// Event is one message for PublishEvents: its Nats-Msg-Id and payload.
type Event struct {
	MsgID   string
	Payload []byte
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
	errs := make([]error, len(events))
	subj, err := EventsSubject(cluster)
	if err == nil && len(events) > MaxPublishBatch {
		err = fmt.Errorf("natsbus: %d events in one batch, at most %d", len(events), MaxPublishBatch)
	}
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	futures := make([]jetstream.PubAckFuture, len(events))
	for i, ev := range events {
		if err := validateMsgID(ev.MsgID); err != nil {
			errs[i] = err
			continue
		}
		f, err := b.js.PublishMsgAsync(&nats.Msg{Subject: subj, Data: ev.Payload}, jetstream.WithMsgID(ev.MsgID))
		if err != nil {
			errs[i] = fmt.Errorf("natsbus: publish %s id %s: %w", subj, ev.MsgID, err)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = fmt.Errorf("natsbus: publish %s id %s: %w", subj, events[i].MsgID, err)
		case <-ctx.Done():
			errs[i] = fmt.Errorf("natsbus: publish %s id %s: %w", subj, events[i].MsgID, errors.Join(ctx.Err(), errors.New("no ack yet")))
		}
	}
	return errs
}
