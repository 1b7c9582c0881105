// Package ctxtime holds the one wait the hub's loops share: sleep for a
// while unless the context ends first.
package ctxtime
