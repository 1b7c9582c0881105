// Package scheduler is Meridian's decision core: it turns a Snapshot of the
// federation into a Plan.
//
// The core is PURE. It never does I/O, never reads the wall clock, never uses
// the global random source, never starts goroutines, and never iterates a map
// in an order that can leak into its output. The current time arrives in
// Snapshot.Now. The same Snapshot always gives the same Plan, and Plan never
// mutates the Snapshot, so the hub, the simulator and the benchmarks can all
// share it.
//
// Caller's contract (the hub's scheduling loop and the simulator):
//
//  1. Build a Snapshot: the queue tree (quota.Tree, with no usage charged:
//     the core charges Running itself), the fairshare ledger, every cluster
//     with per-node, per-GPU free capacity, the running workloads with their
//     placements, and the pending workloads.
//  2. Call Decide(snapshot, config). It returns dispatches, preemptions and a
//     human-readable reason for every workload left pending.
//  3. Commit the plan's dispatches atomically with their quota charges. If the
//     commit conflicts with a newer state, drop the plan and go back to 1;
//     never apply half a plan.
//  4. Apply preemptions only after the commit. A workload that asked for
//     preemption stays pending until its victims have released capacity.
//
// See README.md in this folder for the pipeline and its vocabulary.
package scheduler
