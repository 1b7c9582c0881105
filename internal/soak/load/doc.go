// Package load drives a soak's steady stream of submits: a mix of
// workloads drawn from a seed (fractions, whole GPUs, gangs, several
// priorities, a few preemptors, each running a random time on a simulated
// cluster), sent at a fixed rate to any live hub, each submit's latency
// measured from its scheduled send time.
//
// Mix is pure: the i-th workload of a seed is always the same. Driver does
// the I/O.
//
// This package must never decide whether an invariant holds (see
// internal/soak/check) and never retry a submit without its idempotency
// key.
package load
