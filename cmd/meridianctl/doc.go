// Command meridianctl is the command-line client of the Meridian hub:
// submit, list, explain and cancel workloads, and inspect queues and
// clusters. All of its behaviour lives in internal/cli; this main only wires
// the process (arguments, standard streams, environment, Ctrl-C) to it.
//
// It must never hold logic of its own: anything testable belongs in
// internal/cli.
package main
