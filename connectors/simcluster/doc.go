// Package simcluster is an in-memory GPU cluster that implements the spoke
// agent's Connector interface. The demo, the simulator and the tests use it
// in place of a real Kubernetes or Slurm cluster.
//
// A cluster is described in YAML (see ParseConfig and examples/): nodes with
// their GPU count, accelerator class, GPU memory, CPU, memory, rack, NVLink
// domain and labels, and the fractional GPU modes the cluster supports.
//
// Launch honours the dispatch's placement hint when it still fits, places
// the gang elsewhere in the cluster (respecting each pod set's topology)
// when it does not, and rejects it with a reason when nothing fits. It
// charges per-GPU milli and memory, CPU and memory, runs the workload for
// its declared duration (label meridian.io/sim-duration or runtime env
// SIM_DURATION, default from the config), then reports Succeeded, or Failed
// with the exit code from meridian.io/sim-exit-code / SIM_EXIT_CODE.
//
// Time comes from a Clock: ScaledClock runs simulated time faster than the
// wall clock for the demo, FakeClock moves only when a test advances it.
//
// Test hooks: SetRejectAll, RejectDispatch and the meridian.io/sim-reject
// label (reject), SetSchedulable (cordon a node), Fail (end running
// work with an exit code), SetVanished (the agent stops talking to the hub
// while work keeps running), Launches (count real launches).
//
// This package must never do network or disk I/O beyond reading its config
// file, never launch a dispatch id twice, and never let one Launch's failure
// leave capacity charged.
package simcluster
