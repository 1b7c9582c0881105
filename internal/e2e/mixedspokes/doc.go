// Package mixedspokes holds the end-to-end test of one federation with a
// real Slurm spoke and a real Kubernetes spoke at once: one hub (embedded
// etcd and NATS, authentication on), one agent on the local Slurm cluster
// (scripts/slurm-up.sh, connectors/slurm) and one on the local Kubernetes
// control plane with KWOK GPU nodes (scripts/k8s-up.sh,
// connectors/kubernetes). Two teams of different weights share the H100s
// both clusters offer, and the hub's one fairshare ledger must charge the
// GPU-seconds of both clusters to each team and split them by weight.
//
// The test skips with a loud message when either cluster cannot run here
// (not root, not built, -short); MERIDIAN_REQUIRE_SLURM=1 or
// MERIDIAN_REQUIRE_K8S=1 turns a missing Slurm or Kubernetes into a
// failure. It holds the Slurm test lock (slurmhub.Lock) while it runs,
// keeps its Kubernetes objects in a namespace of its own, and leaves no
// job running behind it. It has no non-test code.
package mixedspokes
