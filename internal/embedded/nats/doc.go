// Package embednats runs a NATS server with JetStream inside the current
// process, for the demo, the simulator and integration tests.
//
// It exists so that Meridian's hub-to-agent transport can be exercised against
// the real nats-server (github.com/nats-io/nats-server/v2) without installing
// anything. The server:
//
//  1. listens on 127.0.0.1 only, on Config.Port or on a random free port
//     when it is 0, and keeps that port across Restart so that clients
//     reconnect by themselves;
//  2. runs JetStream with file storage under Config.StoreDir, so streams,
//     messages and durable consumers survive a Close followed by a Start (or a
//     Restart) on the same directory;
//  3. is quiet: its logs go to Config.Logger through log/slog at warn level
//     and above (dropped when Logger is nil).
//
// Config.Security (security.go) makes the server require a token, user
// and password, nkeys or operator-signed JWTs (.creds files), and TLS with
// optional client certificates, so that the client's credential and TLS
// options are tested against the real server.
//
// Config.Cluster makes the server one node of a NATS cluster with clustered
// JetStream (routes between loopback ports, a server name per node), what
// meridian-soak nats-node runs three of, so that replicated streams are
// tested as production runs them.
//
// Callers must Close the server they started; Close is idempotent.
//
// This package must never listen on a non-loopback address, never be used as
// production messaging (production runs a NATS cluster with TLS and one
// credential per cluster), and never depend on Meridian's domain types.
package embednats
