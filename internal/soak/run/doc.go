// Package run is the chaos soak: it brings the production topology up
// (internal/soak/topology), drives a steady load (internal/soak/load),
// applies a fault schedule drawn from the seed (internal/soak/faults),
// follows etcd all along and checks the invariants at the end
// (internal/soak/check), and returns a Summary whose JSON is the run's
// last line.
//
// This package must never hide a broken invariant: Summary.OK is false,
// and Failures names each one, whenever any count that must be 0 is not.
package run
