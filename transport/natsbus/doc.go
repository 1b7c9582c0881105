// Package natsbus carries Meridian's hub<->agent traffic over NATS JetStream
// with exactly-once publish semantics and at-least-once, acknowledged
// delivery. Payloads are opaque bytes; the protobuf messages live elsewhere.
//
// Subjects (<cluster> is a validated cluster id, see ValidateClusterID):
//
//	meridian.dispatch.<cluster>   hub -> agent  stream DISPATCH  dispatches and cancels
//	meridian.events.<cluster>     agent -> hub  stream EVENTS    Accepted, Rejected, Running, ...
//	meridian.advert.<cluster>     agent -> hub  stream ADVERT    capacity; last value per cluster
//	meridian.heartbeat.<cluster>  agent -> hub  core NATS        liveness, not persisted
//	meridian.register.<cluster>   agent -> hub  core NATS        request; the leader answers
//	meridian.advert-request.<cluster>  hub -> agent  core NATS   "send a full advert now" (a hub
//	                                                              that has no base for a delta)
//
// Identity: in production each cluster's agent has its own NATS user whose
// permissions are AgentPermissions(cluster): its own subjects above, its
// own durable consumer's JetStream calls, and its own reply inbox
// (ClusterInboxPrefix, set with WithInboxPrefix). Such an agent cannot
// create streams or consumers, so the hub makes them (EnsureStreams,
// EnsureDispatchConsumer) and ConsumeDispatches binds to what exists.
// hub/spokeauth issues and revokes those users.
//
// Exactly-once publish: PublishDispatch and PublishEvent set Nats-Msg-Id to
// the caller's id (the dispatch id, or the event id) and wait for the stream's
// PubAck, so a retried publish inside the stream's duplicate window is
// stored once and reported as a duplicate. Past the window, the receiver's
// idempotency (the agent launches keyed on dispatch id) makes a republish
// harmless.
//
// Delivery: each cluster's agent reads its dispatches through a durable,
// explicitly acknowledged consumer (dispatch-<cluster>); the hub reads all
// events through the durable consumer hub-events. A handler's nil return
// acks the message; an error naks it with an increasing delay so it comes
// back; an error wrapping ErrPermanent terminates it (it is never
// redelivered). A message whose handler never returns (the process died) is
// redelivered after the ack wait. Durable consumers live on the server, so
// restarts of either side resume where the acks left off; the connection
// reconnects without limit.
//
// This package must never interpret payloads, never decide what to dispatch,
// never ack a message its handler did not accept, and never block a consumer
// on another cluster's traffic.
package natsbus
