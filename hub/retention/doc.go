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
//   - Index, the finished workloads per queue ordered by end time, fed by
//     the dispatch loop's mirror (which reads every changed workload's
//     summary anyway). Once it was fed a full read, a pass chooses from it
//     what Select would choose, without listing: a pass then costs what
//     it deletes, not what is stored. The index is a hint; the deletes'
//     revision guards stay the authority.
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
