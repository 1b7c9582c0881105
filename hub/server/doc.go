// Package server assembles one hub replica: state (embedded etcd unless
// external endpoints are given, reached over TLS and as an etcd user
// when Config.EtcdClient says so: etcdclient.go), messaging (embedded NATS with JetStream
// unless a URL is given), the store and its watch cache, the leader
// elector, the scheduling loop from hub/dispatch, finished-workload
// retention from hub/retention (on the leader), the gRPC API from
// hub/api and its grpc-gateway REST front, and the operational HTTP
// endpoints /healthz, /readyz (open to every caller) and /metrics (any
// authenticated caller).
//
// # Caller's duties
//
//  1. New(cfg) validates cfg, starts the embedded servers it needs,
//     connects to etcd and NATS and binds both listeners (so Addrs is
//     known at once). On error everything it started is released.
//  2. Run(ctx) serves until ctx ends, then shuts down gracefully: REST,
//     then gRPC (streams get a short grace period), then the loop, which
//     resigns leadership so another replica takes over at once. It returns
//     nil after a clean shutdown and the first fatal error otherwise.
//  3. Close releases connections and the embedded servers. It is
//     idempotent and may be called without Run.
//
// # What it must never do
//
//   - listen on anything but loopback unless the operator configured an
//     address;
//   - make scheduling decisions or write workload state itself: the API
//     the loop and retention own those writes;
//   - exit with running agents' work affected: stopping a hub only stops
//     dispatching.
package server
