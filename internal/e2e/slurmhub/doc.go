// Package slurmhub runs Meridian end to end on a real Slurm cluster: the
// hub (embedded etcd and NATS), a spoke agent with the Slurm connector
// against the daemons scripts/slurm-up.sh starts, and simulated spokes
// beside it.
//
// The package itself holds the few helpers that the end-to-end tests, the
// Meridian-vs-sbatch benchmark and `make demo-slurm` share: start the local
// Slurm cluster (Up), build a connector configuration for it, run the Slurm
// commands against it, list the jobs Meridian submitted, and kill or
// restart one slurmd. The tests and the benchmark live in its _test files.
//
// It must never touch a Slurm job it did not submit (every lookup filters
// on the connector's job comment), never start anything that listens
// beyond loopback, and never be imported by the hub, the agent or a
// connector: it is test and demo scaffolding.
package slurmhub
