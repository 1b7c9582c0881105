// Package sim is Meridian's deterministic discrete-event simulator. It
// drives the same pure core as the hub (scheduler.Decide) with a fake clock
// and a seeded random source: events sit in a (time, seq) heap, so the same
// scenario and seed replay the same run event for event.
//
// A Scenario (YAML or JSON) gives clusters as node groups, a queue tree with
// quotas, explicit jobs and seeded job generators. The engine runs a
// scheduling cycle every SchedulePeriod, applies dispatches and preemptions
// to its own node state, completes jobs after their run time, and accrues the
// fairshare ledger. It reports each team's share against its weight,
// queueing delay p50/p99, utilization and preemptions.
//
// The package never reads the wall clock or the global random source; the
// trace replay of the Alibaba OpenB data lives in the openb subpackage.
package sim
