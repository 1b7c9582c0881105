// Package topology brings up Meridian's production shape on one machine,
// on loopback, every part a process of its own: a three-member etcd
// cluster, a three-node NATS cluster with JetStream streams replicated
// three times, several meridian-hub replicas on them, and meridian-agent
// processes on simulated clusters, each writing its launch journal
// (Agent.Journal), optionally behind a TCP proxy per NATS node
// (Config.AgentProxies). meridian-soak up runs it for a person; the soak's
// end-to-end test and meridian-soak run (internal/soak/run) drive it from
// Go.
//
// Up starts the parts in order and waits for each to be ready:
//
//  1. the etcd members (meridian-soak etcd-member), until the cluster
//     takes a write;
//  2. the NATS nodes (meridian-soak nats-node), until JetStream answers;
//  3. the first hub, which writes the admin API token the others and every
//     client share, then the rest, until each answers /readyz;
//  4. the agents, until every cluster is READY in the hub.
//
// Every process belongs to a procs.Group: the caller kills, pauses and
// restarts them through it, and must Close the Topology, which stops them
// all.
//
// This package must never listen beyond 127.0.0.1, never decide on faults
// or load (it only exposes what they act on), and never hold product logic:
// the hub, the agents, etcd and NATS are the real ones.
package topology
