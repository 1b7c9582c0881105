// Package agent is Meridian's spoke agent: it runs next to one Kubernetes or
// Slurm cluster (or a simulated one) and connects it to the hub over NATS.
//
// What it does, in order (see Agent.Run):
//
//  1. Lists the work the connector already runs (Connector.List), so that
//     an agent restart or a reconnect never forgets running work.
//  2. Registers the cluster with the hub (best effort: a hub that does not
//     answer is not an error) and applies the hub's answer: local work
//     whose dispatch the hub no longer considers current is cancelled.
//  3. Consumes the cluster's durable dispatch subject. Each dispatch is
//     launched through the connector idempotently (keyed on the dispatch
//     id), answered with ACCEPTED or REJECTED(reason), then followed by
//     RUNNING and a terminal event (SUCCEEDED, FAILED(exit code),
//     PREEMPTED, CANCELLED). Cancels and preemptions arrive on the same
//     subject (see CancelMsgID).
//  4. Publishes events through an ordered outbox with Nats-Msg-Id
//     "<dispatch id>:<event>", retried until JetStream stores them, so a
//     redelivery or a retry never duplicates an event and an outage only
//     delays them.
//  5. Sends a heartbeat listing the dispatches it holds, a full capacity
//     advertisement periodically, and a fresh one soon after each change.
//
// The connector sits behind the small Connector interface declared here;
// optional abilities are separate interfaces found by type assertion.
//
// This package must never kill, cancel or preempt work because the hub or
// NATS cannot be reached: only an explicit DispatchCancel or a RegisterAck
// from the hub stops work. It must never launch a dispatch id twice, never
// acknowledge a dispatch before its ACCEPTED or REJECTED event is stored,
// and never block the dispatch consumer on the advertise or heartbeat loops.
package agent
