// Package demo runs Meridian end to end in one process for `make demo`: a
// hub on embedded etcd and NATS, three simulated clusters behind real spoke
// agents, a queue tree of three teams, and a few hundred mixed workloads
// submitted over gRPC. It shows a live table while they run and prints a
// summary: workloads per cluster, each team's share against its weight,
// preemptions and example pending reasons.
//
// It talks to the hub only through the public API (and /metrics), like any
// user; it never reaches into the hub's state.
package demo
