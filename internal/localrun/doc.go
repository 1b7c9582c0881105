// Package localrun starts Meridian's own parts in this process for the
// demo, the benchmarks and the end-to-end tests: a spoke agent on its own
// NATS connection (Agent), and the wait for a hub to be ready (WaitReady).
// It holds no product logic; the agent and the hub are the real ones.
package localrun
