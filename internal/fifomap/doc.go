// Package fifomap is a bounded map from string keys to byte values that
// forgets its oldest entries first and that the garbage collector does not
// have to walk.
//
// Long-lived memories of many small entries (an agent's final answers to
// 100,000 finished dispatches, a hub's record of dispatches reported
// finished) are cheap in bytes but expensive to collect when each entry is
// a map key string and a slice: two pointers every collection follows.
// At 2,000 workloads/s, ten agents sharing one process held about 250 MB
// of such entries, and their collections (one every three seconds, each
// marking for a fifth of a second with every idle core of the machine)
// slowed the hub next to them. A Map keeps keys and values in large byte
// chunks and indexes them by a seeded 64-bit hash in a map of integers,
// which the collector allocates without pointers and never scans: a
// hundred thousand entries are a few hundred pointers.
//
// A hash collision cannot return another key's value: the key is stored
// beside its value and compared on every lookup. Two keys whose hashes
// collide (about one chance in 10^10 for 100,000 keys) keep only the
// newer; the older is forgotten early, as if it had reached the bound.
package fifomap
