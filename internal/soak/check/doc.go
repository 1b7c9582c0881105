// Package check decides whether a soak kept Meridian's promises, from
// three sources that do not trust one another:
//
//   - History follows every committed revision of the workload keys in
//     etcd with a watch from the soak's start (the members' compaction is
//     kept longer than the soak), replays the admitted usage of each
//     queue revision by revision against its cap (nominal + borrow
//     limit), sees every dispatch commit with its leader term (a commit
//     with a term older than one already seen is a deposed leader's
//     write), every requeue and its reason, and each workload's last
//     state;
//   - Launches reads each simulated cluster's own launch journal
//     (simcluster.JournalEntry): a dispatch id launched twice, a gang
//     placed short, one workload running in two places at once, and runs
//     the hub cancelled without a LOST cluster behind it;
//   - the load driver's acknowledged submits, which must all be found.
//
// This package must never change the state it checks.
package check
