// Package testoidc is a real OpenID Connect issuer for tests: HTTPS on
// 127.0.0.1 with a throwaway CA (internal/testpki), a discovery document, a
// JWKS endpoint, ID tokens signed with go-jose (RS256 or ES256), key
// rotation in the middle of a test, and helpers that forge the tokens an
// attacker would send (alg "none", HS256 keyed with the public key).
//
// It is for tests only and must never be imported by production code: its
// keys are generated per test, its tokens carry whatever claims the test
// asks for, and it keeps no secrets.
package testoidc
