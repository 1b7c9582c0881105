// Package tlsreload serves TLS from certificate files that may change. The
// certificate, its key and the client CA bundle are read again when their
// files change, so an operator, cert-manager or a Vault agent can rotate
// them without a restart; connections already open (Watch streams
// included) keep the certificate they began with.
//
// Client certificates are requested but not verified by the handshake:
// VerifyClient checks them against the current CA bundle, so that a
// certificate from another CA reaches the hub's authentication, which
// answers Unauthenticated and records an audit event, instead of a bare
// handshake failure nobody sees.
//
// It must never serve a half-written pair: a reload that fails keeps the
// last good files and logs why.
package tlsreload
