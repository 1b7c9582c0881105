// Package vaultsecrets gets Meridian's secrets from HashiCorp Vault and
// keeps them fresh: the NATS credentials of an agent from KV v2, TLS
// certificates from the PKI secrets engine, and any other KV secret (the
// hub's OIDC client settings, etcd credentials).
//
// It owns four things:
//
//  1. Login (Manager): a token (read from a file; development), AppRole
//     (role id and secret id from files; an agent on a Slurm login node)
//     or Kubernetes (the pod's service account token; an agent in a pod).
//  2. The token's life (Manager.Run): an api.LifetimeWatcher renews the
//     token; when renewal stops (max TTL reached, token revoked, Vault
//     unreachable), it logs in again with backoff until it succeeds.
//  3. KV v2 secrets (KVSecret): read once at start, then again every
//     refresh period; the last good value is served in between.
//  4. Certificates (CertSource): a new ECDSA P-256 key is made here for
//     each certificate and only its CSR goes to <mount>/sign/<role>, so
//     the key never leaves the process. The certificate is renewed at two
//     thirds of its lifetime (RenewAt) and served to TLS through
//     GetClientCertificate / GetCertificate callbacks; OnRotate hooks
//     (e.g. a NATS reconnect) run after each renewal.
//
// When Vault is unreachable the current secrets are kept until they
// expire, calls are retried with capped exponential backoff (Backoff),
// and the outage shows in metrics (meridian_vault_up,
// meridian_vault_errors_total, meridian_vault_secret_expiry_timestamp_seconds),
// a warning log line and Manager.Readiness. Failing to get a secret at
// start is an error that names the setting; nothing here ever exits the
// process or touches running work after a successful start.
//
// Callers' duties:
//
//  1. Build a Config, Validate it (errors name the flags), and call New,
//     which logs in once.
//  2. Create the secrets (NewKVSecret, NewCertSource) and Fetch each once;
//     a failure is a startup error.
//  3. Run Manager.Run and each secret's Run in goroutines until shutdown.
//
// It must never log, wrap into an error, or export as a metric a secret's
// value (tokens, secret ids, keys, credentials), and it never exits the
// process.
package vaultsecrets
