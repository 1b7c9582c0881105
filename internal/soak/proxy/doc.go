// Package proxy is a small TCP proxy for the soak: it sits between a
// client (an agent) and a server (a NATS node) on loopback and can cut the
// client off (every connection closed, new ones refused) or delay every
// byte by a latency, in both directions, order kept.
//
// It must never listen on anything but loopback, and never buffer without
// bound: a delayed direction holds at most 1,024 chunks before it stops
// reading.
package proxy
