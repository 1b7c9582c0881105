// Package k8slocal starts and finds the loopback Kubernetes control plane
// of scripts/k8s-up.sh (etcd, kube-apiserver, controller-manager,
// scheduler and KWOK GPU nodes) for the connector's tests, the Helm
// chart's tests, the end-to-end tests and `make demo-k8s`. It does not
// depend on the connector, so the connector's own tests can use it.
package k8slocal
