// Package dispatch is the hub's scheduling loop: the only writer that moves
// workloads out of QUEUED. One Loop runs in every hub replica; it campaigns
// for leadership through hub/leader and works only while it leads.
//
// Each cycle, the leader:
//
//  1. builds a scheduler.Snapshot from the watch cache (queued workloads are
//     Pending, dispatched ones Running with the usage and placement of their
//     dispatch record), the stored queues, the fairshare ledger and the fleet;
//  2. calls the pure core, scheduler.Decide, recovering a panic inside the
//     cycle;
//  3. commits the dispatches in a few etcd transactions fenced by the leader
//     key and each workload's mod revision (workload -> DISPATCHED plus a
//     dispatch record); a conflict drops the rest of the plan and the next
//     cycle starts from a fresh snapshot;
//  4. publishes each committed dispatch to its cluster with Nats-Msg-Id set
//     to the dispatch id, then the preemptions as DispatchCancel{preempt};
//  5. writes pending reasons that changed, requeues work of LOST clusters,
//     cancels what the API asked to cancel and what returning agents hold
//     but no longer own, and accrues the ledger.
//
// Agent events arrive through the durable hub-events consumer and are applied
// with fenced compare-and-swap writes. On becoming leader the loop republishes
// every unacknowledged dispatch; JetStream's dedupe and the agent's launch
// idempotency on the dispatch id make that safe.
//
// The loop also answers the API: it implements ClusterSource (through the
// fleet registry), Explainer, QueueStatusSource and FitChecker (for
// reject_if_never_fits).
//
// This package must never decide placement itself (that is the core's job),
// never write to etcd without the leader fence, never apply half a gang,
// never publish a dispatch before its commit succeeded, and never let a
// panic in one cycle take the hub down.
package dispatch
