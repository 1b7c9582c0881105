//go:build tools

// Package tools pins the Kubernetes control-plane binaries that
// scripts/k8s-up.sh builds for the integration tests. It is a throwaway
// module, separate from the project's go.mod: k8s.io/kubernetes replaces its
// staging modules with ./staging paths, so it cannot be required by the
// project itself, and these binaries must never leak into it.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
