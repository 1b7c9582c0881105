// Package vaultlocal runs a real Vault server, in dev mode on loopback, for
// the tests of spoke identity and secrets: KV v2, PKI, and the approle,
// kubernetes and userpass auth methods, served by Vault's own HTTP API.
//
// Vault is BUSL-licensed and is a test dependency only. Its binary is built
// by tools/vault/build.sh into a cache outside the repository
// ($HOME/.cache/meridian/vault-v1.21.0/bin/vault, or MERIDIAN_VAULT_BIN);
// this package runs that binary and never links Vault's server code. It
// must never be imported by a command, and Vault never goes into an image,
// a chart or a release artifact.
//
// A test's duties:
//
//  1. Call Start(t). It starts a private dev server (in-memory storage,
//     initialised and unsealed, KV v2 at secret/) on a free loopback port,
//     waits until /v1/sys/health answers, and stops it at t's cleanup;
//     a failed test gets the tail of the server's log.
//  2. When the binary is not built, Start skips t and says how to build it,
//     unless MERIDIAN_REQUIRE_VAULT=1 (CI), which makes it a failure.
//  3. Use Server.Addr and Server.Token (the root token), or Server.Client.
//     The data is gone when the server stops; nothing is shared between
//     tests.
//
// StartServer is the same without a testing.TB, and Running finds the
// shared server scripts/vault-up.sh started.
package vaultlocal
