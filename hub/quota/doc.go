// Package quota is the hub's pure quota and fairshare math: the queue tree
// (tenant / team / project) with per accelerator class nominal quota,
// borrowing and lending limits, the admission check that the scheduler core
// calls in its hot loop, the reclaim arithmetic behind quota preemption, and
// the Slurm-style Fair Tree fairshare computed from a decayed usage ledger.
//
// The design note docs/design/quota-and-fairshare.md states the admission
// rule, the reclaim rule, the Fair Tree formula with a worked example, the
// decay formula and the ledger's JSON encoding.
//
// # Caller's duties
//
//  1. Build a Tree once per configuration with NewTree; it validates every
//     spec and names the offending field in its error.
//  2. Charge the usage of work that is already running (Charge does not
//     check limits: running work is a fact, not a request).
//  3. For each admission attempt call Check (or Fits / CheckID in hot
//     loops); Charge only what Check allowed. Try a gang inside Mark /
//     Rollback (or on a Clone) and Commit only when every member fits.
//  4. When Check fails for a queue that wants its own lent quota back, ask
//     ReclaimNeeds which borrowing queues must shrink, pick victims, and
//     Release their usage on a Clone before re-checking.
//  5. Feed finished or running usage to a Ledger with Accrue and persist it
//     with MarshalJSON; rank leaves with FairTree and Order.
//
// # What this package must never do
//
// It never performs I/O, never reads the wall clock (every instant is an
// argument), never uses global randomness, never starts goroutines, and
// never lets Go map iteration order reach its output: every list it returns
// is sorted. Bad input yields an error naming the field, or a Verdict with a
// reason, never a panic. A Tree and a Ledger are not safe for concurrent
// mutation; Clone gives each goroutine its own copy.
package quota
