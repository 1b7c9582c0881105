// Command meridian-demo runs the whole of Meridian in one process: a hub on
// embedded etcd and NATS, three simulated GPU clusters behind real spoke
// agents, and a mixed workload. `make demo` runs it; `make demo-forever`
// keeps it running for exploring with meridianctl. All of its logic lives in
// internal/demo; this main only parses flags.
package main
