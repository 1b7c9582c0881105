// Command meridian-sim runs Meridian's offline simulations and trace replays.
//
// Usage:
//
//	meridian-sim <subcommand> [flags]
//	meridian-sim help
//
// Subcommands register themselves in the registry (see registry.go), one per
// file, so new simulations can be added without touching main. The openb
// subcommand replays the Alibaba OpenB GPU trace; see docs/benchmarks.md.
//
// This command is a thin main: simulation logic lives in hub/sim/...; it must
// never write into the shared trace data, reach the network, or hide errors
// (it exits non-zero with a message naming the bad flag or file).
package main
