// Package fleet is the hub's registry of spoke clusters. It is fed by the
// agents' capacity advertisements (full snapshots and deltas) and heartbeats,
// and it answers three questions: what each cluster can offer now (as
// scheduler.Cluster values for the scheduling loop), whether each cluster is
// READY, DRAINING (set by an operator through the API) or LOST (silent for
// longer than the timeout), and which dispatch ids each agent says it holds.
// Time comes from an injected clock, so tests drive freshness by hand.
//
// Every hub replica keeps its own registry (followers serve the API from it);
// only the leader's scheduling loop acts on it.
//
// This package must never write to etcd or publish to NATS, never decide
// what to dispatch, and never panic on a malformed advertisement: bad input
// is logged and dropped, and the last good inventory stays.
package fleet
