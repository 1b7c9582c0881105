// Package bench holds Meridian's end-to-end benchmarks: the whole product
// on loopback (hub on embedded etcd and NATS, real spoke agents, simulated
// clusters), driven through the public gRPC API like a user would. It has
// no code of its own outside tests; `make bench` runs it.
package bench
