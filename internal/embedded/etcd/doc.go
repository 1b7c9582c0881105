// Package embedetcd runs an etcd member inside the current process, by
// default a single-member cluster of its own, for the demo, the simulator and integration tests.
//
// It exists so that every part of Meridian that keeps state in etcd can be
// exercised against the real server (go.etcd.io/etcd/server/v3/embed) without
// installing anything. The server:
//
//  1. listens on 127.0.0.1 only, on the client and peer ports given in Config,
//     or on free loopback ports when they are 0;
//  2. uses short raft ticks (10 ms heartbeat, 100 ms election) so that a single
//     member elects itself in tens of milliseconds;
//  3. accepts transactions of up to Config.MaxTxnOps operations (default
//     DefaultMaxTxnOps = 10,000, where stock etcd allows 128), because the hub
//     commits a whole scheduling plan in one transaction and never splits it;
//  4. is quiet: etcd's zap logs at error level and above go to
//     Config.Logger through log/slog (dropped when Logger is nil);
//  5. keeps its data in Config.DataDir, so a Close followed by a Start on the
//     same directory sees everything written before.
//
// With Config.Cluster the process runs one member of a multi-member cluster
// instead (what meridian-soak etcd-member runs three of, to stand in for
// production's external etcd): fixed loopback ports, the members listed in
// Cluster.InitialCluster, and etcd's own raft ticks and log bounds.
//
// Callers must Close the server they started; Close is idempotent.
//
// This package must never listen on a non-loopback address, never be used as
// the production state store (production runs an external etcd cluster), and
// never depend on Meridian's domain types.
package embedetcd
