// Package slurm is the spoke agent's connector for a real Slurm cluster:
// it implements agent.Connector on top of slurmrestd (JWT auth) and the
// Slurm commands (sinfo/squeue --json, sbatch, scancel, scontrol).
//
// What it does:
//
//  1. Inventory: nodes, partitions, features, GPU type and count from
//     slurmrestd's /nodes (or sinfo --json); whole GPUs in use from the gpu
//     IDX ranges of each node's gres_used, MPS and shard use from running
//     jobs' gres_detail (Slurm 22.05 misreports those counts in gres_used);
//     node state (drain, down, fail: not schedulable); the leaf switch of
//     "scontrol show topology" as the node's rack (and its NVLink domain
//     when the node has the "nvlink" feature).
//  2. Launch: one dispatch becomes one batch job (gang = multi-node job,
//     --gres=gpu:<type>:N, --switches=1 for rack/NVLink topology, fractional
//     = --gres=mps:P or shard:N). The job comment carries the dispatch id
//     (see Comment); before submitting, Launch looks for a job with that
//     comment, so a redelivered dispatch is never submitted twice. Once the
//     first poll has adopted every job of ours, memory is complete and
//     Launch looks in Slurm only for a dispatch whose submit failed with a
//     fault (its job may exist although the answer was lost).
//  3. Status: a poll loop maps Slurm job states onto agent work states and
//     exit codes decoded from the raw wait status, and keeps terminal states
//     after Slurm forgets the job (MinJobAge).
//  4. Cancel: REST DELETE or scancel; a job already gone is done.
//  5. Errors: Slurm's "this request can never run" errors (impossible gres,
//     bad constraint or partition) become agent.Reject with Slurm's reason;
//     auth failures, slurmctld down and network errors are returned as
//     plain errors so the agent retries.
//
// Concurrency: Launch, Cancel, List, Inventory and the poll loop may all run
// at once. Launch and Cancel take a lock per dispatch id, so calls for
// different dispatches proceed in parallel while a duplicate concurrent
// Launch of one id waits and then finds the job the first one submitted;
// concurrent job listings are shared (one request to Slurm per round).
//
// Version-specific JSON sits behind the Adapter interface (one
// implementation, openapi/v0.0.38, for Slurm 22.05).
//
// This package must never touch a Slurm job whose comment it did not write
// (CommentPrefix, and the cluster id when one is configured), never submit a
// dispatch id twice, never block Launch on the Events channel, and never
// panic on malformed Slurm output: bad JSON or GRES strings are errors.
package slurm
