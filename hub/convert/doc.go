// Package convert translates between Meridian's wire types (meridian.v1 and
// meridian.agent.v1 protobufs) and the pure scheduler's types: a submitted
// Workload becomes a scheduler.Workload, an agent's Advertisement becomes a
// scheduler.Cluster, stored Queues become quota.QueueSpecs, and a plan's
// placement becomes the agent's placement hint.
//
// It also fixes the small conventions both ends of the dispatch subject
// share: a DispatchCancel travels with the message id CancelMsgID(dispatch
// id), a Dispatch with the bare dispatch id.
//
// This package must never do I/O, read the clock, keep state, or panic on
// bad input: every conversion of untrusted data returns an error naming the
// field.
package convert
