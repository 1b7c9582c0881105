package security

import (
	"strings"
	"testing"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// The tenants every test shares:
//
//	tenant-a        access: group:a-admins manage, group:a-viewers view
//	                submit_policy: max_priority 100, no non-preemptible work
//	tenant-a/leaf   access: group:a-submitters submit
//	tenant-b        access: group:b-admins manage (same policy)
//	tenant-b/leaf
//
// and one queued workload in each leaf.
const (
	tenantA = "tenant-a"
	tenantB = "tenant-b"
	leafA   = "tenant-a/leaf"
	leafB   = "tenant-b/leaf"
)

// Roles of the matrix.
const (
	roleAdmin  = "admin"        // the bootstrap API token: admin
	roleTAdmin = "tenant-admin" // alice: manage on tenant-a (group a-admins), tokens.create
	roleSub    = "submitter"    // sam: submit (so view) on tenant-a/leaf
	roleViewer = "viewer"       // vera: view on tenant-a
	roleOther  = "other-tenant" // bob: manage on tenant-b (group b-admins), tokens.create
	roleAnon   = "anonymous"    // no credentials
)

var roles = []string{roleAdmin, roleTAdmin, roleSub, roleViewer, roleOther, roleAnon}

// world is a hub with the two tenants and a credential per role.
type world struct {
	*fixture
	creds    map[string]cred
	wA, wB   string // the queued workload of each leaf
	policy   *meridianv1.SubmitPolicy
	leafACLA []*meridianv1.AccessEntry
	leafACLB []*meridianv1.AccessEntry
}

func newWorld(t *testing.T) *world {
	t.Helper()
	f := startHub(t)
	w := &world{fixture: f}
	maxPrio, nonPreempt := int32(100), false
	w.policy = &meridianv1.SubmitPolicy{MaxPriority: &maxPrio, AllowNonPreemptible: &nonPreempt}
	w.leafACLA = access("group:a-submitters=submit")
	w.leafACLB = access("group:b-submitters=submit")
	f.mustCreateQueue(t, &meridianv1.Queue{Path: tenantA, Weight: 1, Quotas: quotas(8000), SubmitPolicy: w.policy,
		Access: access("group:a-admins=manage", "group:a-viewers=view")})
	f.mustCreateQueue(t, &meridianv1.Queue{Path: leafA, Quotas: quotas(4000), Access: w.leafACLA})
	f.mustCreateQueue(t, &meridianv1.Queue{Path: tenantB, Weight: 1, Quotas: quotas(8000), SubmitPolicy: w.policy,
		Access: access("group:b-admins=manage")})
	f.mustCreateQueue(t, &meridianv1.Queue{Path: leafB, Quotas: quotas(4000), Access: w.leafACLB})
	w.wA = f.mustSubmit(t, f.adminCred(), leafWorkload(leafA, "fixed-a"))
	w.wB = f.mustSubmit(t, f.adminCred(), leafWorkload(leafB, "fixed-b"))
	w.creds = map[string]cred{
		roleAdmin:  f.adminCred(),
		roleTAdmin: f.oidcCred(t, "alice", "a-admins"),
		roleSub:    f.oidcCred(t, "sam", "a-submitters"),
		roleViewer: f.oidcCred(t, "vera", "a-viewers"),
		roleOther:  f.oidcCred(t, "bob", "b-admins"),
		roleAnon:   {name: roleAnon},
	}
	return w
}

// tenantOf maps a matrix target to its tenant queue.
func tenantOf(target string) string {
	if target == "B" {
		return tenantB
	}
	return tenantA
}

func leafOf(target string) string { return tenantOf(target) + "/leaf" }

// canSee reports whether role may see queue path (and its workloads).
func canSee(role, path string) bool {
	under := func(root string) bool { return path == root || strings.HasPrefix(path, root+"/") }
	switch role {
	case roleAdmin:
		return true
	case roleTAdmin, roleViewer:
		return under(tenantA)
	case roleSub:
		return under(leafA)
	case roleOther:
		return under(tenantB)
	}
	return false
}

// ownLeaf is a leaf queue role may see, for watch barriers.
func ownLeaf(role string) string {
	if role == roleOther {
		return leafB
	}
	return leafA
}
