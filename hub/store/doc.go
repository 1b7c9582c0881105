// Package store is the hub's state layer over etcd: a key layout, fenced and
// optimistic transactional writes, paginated reads, and a watch cache.
//
// # Key layout
//
// Every key is /meridian/<kind>/<id> (see Key and Prefix). The kinds are
// workloads, queues, clusters, dispatches, idempotency and ledger. Ids are
// non-empty, at most 512 bytes, and use letters, digits and . _ - : @ = + ~ and
// '/' as a separator between non-empty segments (queue paths such as
// tenant/team/project are ids).
//
// # Writes
//
// Commit applies a list of Ops in one etcd transaction:
//
//  1. every conditional Op (PutIfModRev, Delete, Check) adds a mod-revision
//     compare for its key; mod revision 0 means "must not exist";
//  2. a non-nil leader.Fence adds the leader's compare, so a deposed leader
//     cannot write (ErrNotLeader);
//  3. a failed key compare yields a *ConflictError naming every stale key
//     (IsConflict); the fence is checked in an outer transaction and the key
//     compares in a nested one, so the two failures are always told apart;
//  4. nothing is ever split: more Ops than Options.MaxTxnOps is refused with
//     ErrTooManyOps before anything is sent. Stock etcd allows 128 operations
//     per transaction; the embedded server allows 10,000 and a production
//     etcd must run with a --max-txn-ops at least as large as MaxTxnOps.
//
// # Watch cache
//
// Cache mirrors one prefix in memory: it lists the prefix at one revision,
// then watches from the next revision, and relists when etcd has compacted
// the revision it needs. Snapshot returns a copy; WaitForRevision waits until
// the cache has seen a given revision (it asks etcd for progress
// notifications, so writes outside the prefix do not stall it). Events
// subscriptions are coalesced per key and never block the watcher.
//
// With CacheOptions.SnapshotFile the cache keeps a copy of its items on
// disk, exactly as of one revision (snapshot.go), and its first list
// starts from it (warm.go): it resumes the watch from the copy's revision,
// or, when etcd has compacted that history, checks each copied key's
// revisions against etcd's key index and reads only what changed. A file
// that cannot be trusted costs a full list, never a wrong cache.
//
// This package must never make scheduling decisions, never retry a conflict
// on its own (the caller re-snapshots and re-plans), never split a commit,
// and never import the protobuf API types: values are opaque bytes.
package store
