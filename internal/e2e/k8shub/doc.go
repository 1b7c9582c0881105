// Package k8shub runs Meridian end to end on a real Kubernetes control
// plane: the hub (embedded etcd and NATS), a spoke agent with the
// Kubernetes connector against the kube-apiserver, kube-scheduler,
// controller-manager and KWOK GPU nodes that scripts/k8s-up.sh starts,
// and a simulated cluster beside it (a mixed fleet).
//
// The package itself holds the few helpers that the end-to-end tests and
// `make demo-k8s` share: start the local control plane (Up), a connector
// configuration for it, and the runtime extras that keep KWOK's pods
// running for a while. The tests live in its _test files.
//
// It never touches objects outside the namespace it is given, never starts
// anything that listens beyond loopback, and is never imported by the hub,
// the agent or a connector: it is test and demo scaffolding.
package k8shub
