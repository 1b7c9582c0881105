// Package leader elects the one hub replica that may schedule and commit, and
// hands it a Fence that every one of its etcd commits must carry.
//
// Election uses etcd's concurrency recipe: each candidate holds a lease-bound
// key under a prefix, and the candidate whose key has the lowest create
// revision leads. The leader's Fence is that key and its create revision.
// A commit guarded by Fence.Cmp() succeeds only while the key still exists
// with that create revision, so once the lease expires (the process hung,
// was partitioned, or resigned) any write it still attempts is refused with
// ErrNotLeader, even if it has not noticed yet that it lost.
//
// Caller's duties:
//
//  1. Call Campaign; it blocks until this replica leads (or ctx ends).
//  2. Put Fence.Cmp() in the If clause of every transaction that acts as the
//     leader (hub/store does this for you), and treat ErrNotLeader as "stop
//     scheduling now".
//  3. Watch Done(): when it closes, leadership is gone; drop in-memory plans
//     and Campaign again.
//  4. Resign on shutdown so a successor need not wait for the lease TTL.
//
// This package must never decide anything about workloads, never write keys
// other than its election keys, and never treat "I believe I lead" as proof:
// only a fenced commit is.
package leader
