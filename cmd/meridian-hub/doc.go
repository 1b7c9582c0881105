// Command meridian-hub runs one replica of the Meridian hub: the gRPC and
// REST API, the leader election and the scheduling loop, over embedded etcd
// and NATS by default or external ones given by a configuration file
// (--config, a HubConfiguration; see examples/config/hub.yaml), environment
// variables or flags, each winning over the one before.
// `meridian-hub config validate` checks a configuration and
// `--print-config` prints the effective one. It prints its listening addresses, serves until SIGINT or
// SIGTERM, then shuts down gracefully (resigning leadership so another
// replica takes over at once).
//
// It must never listen beyond loopback unless told to, and never touch
// running work on the clusters when it stops: stopping the hub only stops
// dispatching. See docs/operators.md.
package main
