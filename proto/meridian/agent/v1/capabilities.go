package agentv1

import (
	"fmt"
	"hash/fnv"
)

// Capabilities an agent lists in Advertisement.capabilities, and a hub in
// RegisterAck.capabilities.
const (
	// CapabilityDispatchBatch: the agent reads HubMessage.batch, several
	// dispatches in one message.
	CapabilityDispatchBatch = "dispatch-batch"
	// CapabilityEventBatch: the hub reads EventBatch, several events in
	// one message.
	CapabilityEventBatch = "event-batch"
)

// EventBatchMsgIDPrefix starts the Nats-Msg-Id of an EventBatch on an
// events subject (and of a DispatchBatch, BatchMsgID); a single
// DispatchEvent's id (its event_id) never does.
const EventBatchMsgIDPrefix = "batch:"

// BatchMsgID is the Nats-Msg-Id of a message that carries several items
// (a DispatchBatch or an EventBatch): EventBatchMsgIDPrefix, the first
// item's id, the count and a hash of every id in order. A retried publish
// of the same batch has the same id, so the stream stores it once; two
// batches of different items never share one. id(i) is the i-th item's
// id, for 0 <= i < n; n must be at least 1.
func BatchMsgID(n int, id func(i int) string) string {
	h := fnv.New64a()
	for i := range n {
		_, _ = h.Write([]byte(id(i)))
		_, _ = h.Write([]byte{0})
	}
	return fmt.Sprintf("%s%s:%d:%016x", EventBatchMsgIDPrefix, id(0), n, h.Sum64())
}
