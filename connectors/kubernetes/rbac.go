package kubernetes

import (
	rbacv1 "k8s.io/api/rbac/v1"
)

// RBACRules are the least-privilege permissions the connector uses with
// cfg: cluster-wide read of nodes and pods (inventory and free capacity),
// and in its namespace only the Jobs (and PodGroups with the coscheduling
// gang) it creates and deletes. Nothing else is read or written. The Helm
// chart and the tests grant exactly these.
func RBACRules(cfg Config) (cluster, namespaced []rbacv1.PolicyRule) {
	cluster = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes", "pods"}, Verbs: []string{"get", "list", "watch"}},
	}
	namespaced = []rbacv1.PolicyRule{
		{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"get", "list", "watch", "create", "delete"}},
	}
	if cfg.Gang == GangCoscheduling {
		namespaced = append(namespaced, rbacv1.PolicyRule{APIGroups: []string{PodGroupGVR.Group}, Resources: []string{PodGroupGVR.Resource}, Verbs: []string{"create", "delete"}})
	}
	return cluster, namespaced
}
