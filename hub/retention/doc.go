// Package retention deletes finished workloads (SUCCEEDED, FAILED,
// CANCELLED) from etcd so that etcd and every watch cache stay bounded on a
// busy hub.
//
// It has two parts:
//
//   - Select, the pure decision: given the finished workloads with their end
//     times, a Policy and the current time, it says which to delete now and
//     why (older than the TTL, or beyond the per-queue cap). It does no I/O
//     and reads no clock.
//   - Runner, the I/O: on the leader only, every Interval it lists the
//     workloads, calls Select, and deletes the chosen ones in bounded
//     batches.
//
// The Runner's contract:
//
//  1. Every commit is fenced by the leader's election key (the same
//     leader.Fence the dispatch loop commits with), so a replica that lost
//     leadership deletes nothing.
//  2. Each workload is deleted only if its mod revision is the one listed,
//     so a workload that changed after the list stays.
//  3. A workload's idempotency key is deleted in the same transaction, and
//     only while it still names that workload; a client that replays the
//     key afterwards submits a new workload.
//
// This package must never delete a workload that is not in a terminal
// phase, never write without the fence, and never put more than one batch
// in one transaction.
package retention
