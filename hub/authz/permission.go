package authz

import (
	"fmt"
	"strings"

	"github.com/meridian-gpu/meridian/internal/editdist"
)

// Permission is a global permission, granted to groups and users by Config
// and bound to API tokens when they are minted.
type Permission string

// The global permissions.
const (
	// PermAdmin allows everything, and bypasses priority ceilings.
	PermAdmin Permission = "admin"
	// PermQueuesCreate creates top-level (tenant) queues, with their
	// initial access list (how a platform team hands a new tenant to its
	// admins), and sets their quotas, weights, ceilings and description. It
	// never changes an existing queue's access list.
	PermQueuesCreate Permission = "queues.create"
	// PermClustersManage drains, resumes (cordons) and registers clusters.
	PermClustersManage Permission = "clusters.manage"
	// PermWorkloadsSubmitAny submits to any queue (priority ceilings still
	// apply).
	PermWorkloadsSubmitAny Permission = "workloads.submit_any"
	// PermWorkloadsCancelAny cancels any workload.
	PermWorkloadsCancelAny Permission = "workloads.cancel_any"
	// PermWorkloadsViewAll views every queue and workload.
	PermWorkloadsViewAll Permission = "workloads.view_all"
	// PermAuditRead reads the audit log.
	PermAuditRead Permission = "audit.read"
	// PermTokensCreate mints API tokens carrying at most the caller's own
	// permissions.
	PermTokensCreate Permission = "tokens.create"
)

// allPermissions lists every permission in declaration order; a
// permission's bit is its index.
var allPermissions = [...]Permission{
	PermAdmin, PermQueuesCreate, PermClustersManage, PermWorkloadsSubmitAny,
	PermWorkloadsCancelAny, PermWorkloadsViewAll, PermAuditRead, PermTokensCreate,
}

// Permissions returns every known permission, in a fixed order.
func Permissions() []Permission {
	out := make([]Permission, len(allPermissions))
	copy(out, allPermissions[:])
	return out
}

// permSet is a set of permissions, one bit each.
type permSet uint16

func (s permSet) has(p Permission) bool {
	b, ok := permBit(p)
	return ok && (s&b != 0 || s&permBitAdmin != 0)
}

const permBitAdmin permSet = 1

func permBit(p Permission) (permSet, bool) {
	for i, q := range allPermissions {
		if q == p {
			return 1 << i, true
		}
	}
	return 0, false
}

func (s permSet) list() []Permission {
	var out []Permission
	for i, p := range allPermissions {
		if s&(1<<i) != 0 {
			out = append(out, p)
		}
	}
	return out
}

// ParsePermission checks that s names a known permission. The error says
// which are known and, for a near miss, which one was probably meant.
func ParsePermission(s string) (Permission, error) {
	p := Permission(s)
	if _, ok := permBit(p); ok {
		return p, nil
	}
	names := make([]string, len(allPermissions))
	for i, q := range allPermissions {
		names[i] = string(q)
	}
	return "", fmt.Errorf("unknown permission %q%s", s, suggest(s, names))
}

// Verb is what an access-list entry allows on a queue and every queue
// below it.
type Verb string

// The queue verbs. manage implies all the others; submit, cancel and
// update each imply view.
const (
	// VerbView sees the queue, its workloads (get, list, watch, explain).
	VerbView Verb = "view"
	// VerbSubmit submits workloads to the queue; a submitter may also
	// cancel the workloads it submitted itself.
	VerbSubmit Verb = "submit"
	// VerbCancel cancels any workload in the queue.
	VerbCancel Verb = "cancel"
	// VerbUpdate changes the queue's description (its non-security
	// fields); never quotas, weight, ceilings or the access list.
	VerbUpdate Verb = "update"
	// VerbManage is everything on the queue and its subtree: create and
	// delete child queues, change the access list, and set the quotas,
	// weights and ceilings of the queues strictly below.
	VerbManage Verb = "manage"
)

var allVerbs = [...]Verb{VerbView, VerbSubmit, VerbCancel, VerbUpdate, VerbManage}

// Verbs returns every queue verb, in a fixed order.
func Verbs() []Verb {
	out := make([]Verb, len(allVerbs))
	copy(out, allVerbs[:])
	return out
}

// verbSet is a set of verbs, one bit each (the index in allVerbs).
type verbSet uint8

const (
	vView verbSet = 1 << iota
	vSubmit
	vCancel
	vUpdate
	vManage
	vAll = vView | vSubmit | vCancel | vUpdate | vManage
)

func verbBit(v Verb) (verbSet, bool) {
	for i, w := range allVerbs {
		if w == v {
			return 1 << i, true
		}
	}
	return 0, false
}

// closed adds what the verbs imply: manage implies all, and any verb
// implies view.
func (s verbSet) closed() verbSet {
	if s&vManage != 0 {
		return vAll
	}
	if s != 0 {
		s |= vView
	}
	return s
}

func (s verbSet) list() []Verb {
	var out []Verb
	for i, v := range allVerbs {
		if s&(1<<i) != 0 {
			out = append(out, v)
		}
	}
	return out
}

// ParseVerb checks that s names a known queue verb.
func ParseVerb(s string) (Verb, error) {
	if _, ok := verbBit(Verb(s)); ok {
		return Verb(s), nil
	}
	names := make([]string, len(allVerbs))
	for i, v := range allVerbs {
		names[i] = string(v)
	}
	return "", fmt.Errorf("unknown verb %q%s", s, suggest(s, names))
}

// suggest returns "; did you mean "x"?" for the closest known name within
// a small edit distance, or the list of known names otherwise.
func suggest(s string, known []string) string {
	best, bestD := "", 1<<30
	for _, k := range known {
		d := editdist.Distance(strings.ToLower(s), k)
		if d < bestD {
			best, bestD = k, d
		}
	}
	if bestD <= 3 && bestD < len(best) {
		return fmt.Sprintf("; did you mean %q?", best)
	}
	return "; known: " + strings.Join(known, ", ")
}
