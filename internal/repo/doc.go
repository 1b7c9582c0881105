// Package repo finds the repository's root, for tests and tools that run
// the project's scripts (scripts/k8s-up.sh, scripts/slurm-up.sh) from any
// package directory.
package repo
