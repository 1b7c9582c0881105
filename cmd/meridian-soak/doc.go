// Command meridian-soak runs Meridian's production shape on one machine,
// on loopback, for the soak and for anyone who wants to see it:
//
//	meridian-soak up --dir /tmp/soak [--hubs 3] [--agents 4]
//
// starts a three-member etcd cluster, a three-node NATS cluster with
// JetStream (streams replicated three times), the hub replicas and the
// agents on simulated clusters, each a process of its own with its log in
// <dir>/logs, prints the endpoints once everything is ready, and stops it
// all on Ctrl-C. See docs/reliability.md.
//
// The chaos soak runs the same shape under load while faults hit it:
//
//	meridian-soak run --dir D --duration 3m --seed N [--rate 500] [--hubs 3] [--agents 4] [--faults K,...]
//
// and prints progress, the fault timeline and, as its last line, a JSON
// summary; it exits 1 when an invariant broke (internal/soak/run; make
// soak).
//
// Its two building blocks are commands too, one server per process:
//
//	meridian-soak etcd-member --name m1 --data-dir D --client-url http://127.0.0.1:P \
//	    --peer-url http://127.0.0.1:Q --initial-cluster m1=http://127.0.0.1:Q,...
//	meridian-soak nats-node --name n1 --port P --cluster-port C \
//	    --routes nats://127.0.0.1:C2,nats://127.0.0.1:C3 --store-dir D
//
// They run the same servers the hub embeds (internal/embedded/etcd and
// internal/embedded/nats) as one member or node of a cluster, until
// SIGTERM or SIGINT.
//
// It must never listen beyond 127.0.0.1 or be used to run production: it
// is a test bench. The process supervision lives in internal/soak/procs
// and the topology in internal/soak/topology; this command only parses
// flags.
package main
