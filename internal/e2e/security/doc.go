// Package security is the hub's security test suite: a real hub (embedded
// etcd and NATS, authentication on, TLS with a client CA for mutual TLS, a
// test OIDC issuer, a bootstrap admin API token) attacked through its gRPC
// and REST APIs by every kind of caller.
//
// Its tests check DESIGN.md's "Identity and trust" and the invariants
// "every RPC is authorized through the one layer" and "a denied request
// changes no state and leaves an audit event":
//
//   - TestCrossTenantMatrix: every RPC of every meridian.v1 service ×
//     six roles × own or other tenant, over gRPC and REST, with the expected
//     answer stated per case; after each refusal the stored state is
//     compared and the audit event looked up. It fails when an RPC appears
//     that the matrix does not cover.
//   - TestNotFoundDoesNotLeak, TestQuotaBoundary, TestSubmitPolicy: probing
//     for other tenants' ids, the quota and access-list boundary, priority
//     ceilings.
//   - TestBadCredentials, TestOIDCKeyRotation: forged, expired, revoked and
//     malformed credentials; issuer key rotation.
//   - TestTLS, TestInsecureListenerRefused: plaintext to TLS, certificate
//     rotation under a live stream, mutual TLS, listeners beyond loopback.
//   - TestAPITokens: one-time secrets, narrowing, minting limits,
//     revocation.
//   - FuzzGuardCredentials: random Authorization headers through the real
//     guard.
//
// Servers listen on 127.0.0.1 only. The package holds tests only; nothing
// may import it.
package security
