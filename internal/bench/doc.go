// Package bench holds Meridian's end-to-end benchmarks: the whole product
// on loopback (hub on embedded etcd and NATS, real spoke agents, simulated
// clusters), driven through the public gRPC API like a user would, with
// authentication on by default (TLS on both listeners, OIDC bearer tokens
// from a test issuer; MERIDIAN_BENCH_AUTH=none runs the hub without it).
// It has no code of its own outside tests; `make bench` runs it.
package bench
