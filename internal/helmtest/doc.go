// Package helmtest renders and checks Meridian's Helm charts with the real
// Helm CLI (installed by scripts/helm.sh at a pinned version): it finds the
// helm binary, runs `helm template` and `helm lint` with given values, and
// splits the rendered manifests into objects. Its tests hold the agent chart
// (charts/meridian-agent) to the Kubernetes connector's contract: the RBAC
// the chart grants is exactly kubernetes.RBACRules for the same settings,
// bad values are refused naming the field, and, on the local kube-apiserver
// started by scripts/k8s-up.sh, the applied ServiceAccount may do what the
// connector uses and nothing more (checked with SubjectAccessReviews).
// They hold the hub chart (charts/meridian-hub) to the hub's own
// configuration loader, render no RBAC for it, apply it to the same
// apiserver, and run the real meridian-hub binary with its rendered args,
// env and ConfigMap until a workload passes through it.
//
// It must never install a release into a cluster, never talk to anything
// but the loopback apiserver of the tests, never download the Helm CLI
// itself (scripts/helm.sh does, outside the tests), and never leave objects
// behind: what a test applies it deletes.
//
// Tests skip loudly when helm is missing unless MERIDIAN_REQUIRE_HELM=1,
// and skip the apiserver part like connectors/kubernetes does unless
// MERIDIAN_REQUIRE_K8S=1.
package helmtest
