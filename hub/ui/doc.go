// Package ui serves Meridian's web ops dashboard at /ui on the hub's HTTP
// listener: the fleet, the queue tree, the workloads table, a workload's
// detail with its explanation, and live updates from the watch stream.
//
// The dashboard is plain HTML, CSS and ES modules embedded with go:embed:
// nothing is downloaded at run time and nothing needs a front-end build.
// The browser calls the hub's own REST API (/v1/...) with the signed-in
// user's bearer token, so every view shows only what that user may see and
// every action is decided by the hub's one authorization layer.
//
// The package must never hold a privileged identity of its own, call the
// API on a user's behalf, or store a credential on the server. Its only
// server-side logic is serving the assets with a strict
// Content-Security-Policy, telling the browser which OIDC issuers it may
// sign in with (config.json), and forwarding a browser's OIDC
// authorization-code exchange (with its PKCE verifier) to the issuer's
// token endpoint, which the browser cannot call itself across origins.
// docs/design/dashboard.md explains the choices.
package ui
