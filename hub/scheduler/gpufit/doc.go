// Package gpufit decides whether a pod-shaped request fits on one node, GPU by
// GPU and fractions included, and rates where it should go.
//
// It is the node-level placement kernel shared by the hub's scheduling core,
// the OpenB trace replay (hub/sim/openb) and the benchmarks:
//
//   - [Fits] is the pure feasibility predicate: CPU, memory, and r.GPUs
//     distinct GPUs that each have at least r.Milli milli-GPU and
//     r.GPUMemMiB MiB free.
//   - [Node.Apply] and [Node.Undo] charge and release a placement; Undo is the
//     exact inverse of Apply, so a gang can be tried and rolled back.
//   - A [Scorer] rates a feasible (node, request) pair and picks the GPU
//     indices. [BestFit] and [FGD] reproduce the baselines of Weng et al.,
//     "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
//     Fragmentation Gradient Descent" (USENIX ATC 2023) as the public
//     simulator implements them; [Meridian] is our fragmentation-aware policy.
//   - [Fragmentation] is FGD's node fragmentation measure against a
//     [TargetWorkload], the popularity-weighted mix of pod shapes.
//
// Caller's duties:
//
//  1. Validate requests with [Request.Validate] before use; the functions
//     here assume a valid request and a node whose GPUs hold
//     0 <= FreeMilli <= MilliPerGPU.
//  2. Filter nodes by accelerator class (a pod's allowed GPU models) before
//     calling Fits; the class is a property of the caller's pod, not of
//     Request.
//  3. Call Score only on a node for which Fits returned true.
//  4. Apply the GPU indices that Score returned, and Undo with the same
//     indices.
//
// This package must never do I/O, read the clock, use global or unseeded
// randomness, start goroutines or keep hidden mutable state: every function
// is deterministic in its arguments. Fits and Score must not allocate on the
// hot path. Apply and Undo panic only on programmer error (indices that do
// not match the request, or a charge that would drive a GPU below zero or
// above its capacity); bad external input is rejected by Request.Validate
// with an error that names the field.
package gpufit
