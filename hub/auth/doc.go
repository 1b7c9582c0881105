// Package auth authenticates hub API requests: it turns the credentials a
// caller presented (an Authorization header, a verified client certificate
// chain) into one Principal, or into an error that says why not.
//
// Methods, each an Authenticator, tried in order by a Chain:
//
//   - OIDC bearer tokens (ID tokens) from one or more trusted issuers,
//     verified with go-oidc; results are cached per token until it expires.
//   - API tokens "mrd_<id>_<secret>" for automation, stored only as a
//     SHA-256 hash behind a TokenStore (etcd in the hub, memory in tests).
//   - Client certificates whose chain the TLS listener already verified.
//   - None: a fixed principal, for a hub the operator runs on loopback with
//     authentication off.
//
// Caller's duties (the gRPC interceptor and the REST gateway):
//
//  1. Build Credentials from the request: the raw Authorization value, the
//     TLS verified chains (never the unverified peer certificates) and the
//     remote address.
//  2. Call Authenticate once per request, before authorization and before
//     any handler; put the Principal in the context with WithPrincipal.
//  3. On error, answer with ClientReason(err) (Unauthenticated, or
//     Unavailable when IsUnavailable) and write AuditDetail(err) to the
//     audit log. IsNoCredentials tells "send a bearer token" apart.
//
// What this package must never do:
//
//   - Decide what a principal may do. That is hub/authz; Principal.Roles of
//     an API token are opaque strings passed through.
//   - Put a secret (a bearer token, an API token secret) in an error, a log
//     line, a metric or a String/GoString/LogValue result, or use one as a
//     cache key: caches are keyed by its SHA-256.
//   - Block a request without bound on an unreachable identity provider:
//     discovery is lazy, retried with backoff, and fails fast in between.
//   - Trust certificates the TLS layer did not verify.
package auth
