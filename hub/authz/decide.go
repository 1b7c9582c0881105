package authz

import (
	"fmt"
	"strconv"
	"strings"
)

// WorkloadResolver finds a workload's queue, for the actions that name a
// workload by id (get, cancel, explain). The hub implements it from its
// store or cache.
type WorkloadResolver interface {
	// QueueOf returns the queue path of the workload, and false when no
	// such workload exists. It is called on the request path: it should
	// answer from memory and must be safe for concurrent use.
	QueueOf(workloadID string) (path string, found bool)
}

// WorkloadOwnerResolver is an optional ability of a WorkloadResolver: the
// user who submitted a workload, so a submitter may cancel its own work.
type WorkloadOwnerResolver interface {
	OwnerOf(workloadID string) (user string, found bool)
}

// TokenResolver finds the user an API token belongs to, for revoking.
type TokenResolver interface {
	// TokenOwner returns the user the token acts for, and false when no
	// such token exists. Safe for concurrent use.
	TokenOwner(tokenID string) (user string, found bool)
}

// Resolvers look up what a request names by id. A nil resolver makes the
// actions that need it answer "not found" (fail closed), except for the
// callers whose global permissions make the answer moot (admin).
type Resolvers struct {
	Workloads WorkloadResolver
	Tokens    TokenResolver
}

// Bases of allowed decisions (constants: an allowed decision allocates
// nothing on the hot path).
const (
	basisOpen          = "open to every caller, even unauthenticated"
	basisAuthenticated = "any authenticated caller"
	basisFiltered      = "any authenticated caller; results filtered to the queues the caller may view"
	basisAdmin         = "global permission admin"
	basisSubmitACL     = "queue access list: submit on the queue or an ancestor"
	basisSubmitAny     = "global permission workloads.submit_any"
	basisViewACL       = "queue access list: view on the queue or an ancestor"
	basisViewAll       = "global permission workloads.view_all"
	basisCancelACL     = "queue access list: cancel on the queue or an ancestor"
	basisCancelAny     = "global permission workloads.cancel_any"
	basisCancelOwn     = "own workload, and submit on its queue or an ancestor"
	basisCreateTop     = "global permission queues.create (top-level queue)"
	basisManageParent  = "queue access list: manage on the parent or an ancestor"
	basisUpdate        = "queue access list and queues.create, per field"
	basisDeleteTop     = "global permission queues.create and manage on the queue"
	basisTokenOwn      = "own API token"
	basisTokenList     = "any authenticated caller; only its own tokens unless admin"
	basisTokenMint     = "global permission tokens.create; every requested permission, the user and every group held by the caller"
)

// Authorize decides one action on one target that is already resolved
// (for a workload, Target.Queue is its queue; Target.Owner its submitter
// when known). AuthorizeMethod is the usual entry point.
func (p *Principal) Authorize(act Action, t Target) Decision {
	return p.authorize(act, t, Resolvers{})
}

// AuthorizeMethod decides one gRPC call: fullMethod as in
// grpc.UnaryServerInfo.FullMethod, req the request message (nil for a
// streaming method: no streaming rule needs it). A method with no rule is
// refused.
func (p *Principal) AuthorizeMethod(fullMethod string, req any, r Resolvers) Decision {
	rule, ok := ruleIndex[fullMethod]
	if !ok {
		return deny(CodePermissionDenied, Action(fullMethod), Target{},
			"method "+fullMethod+" is not permitted", "no authorization rule for this method")
	}
	t := Target{Kind: rule.Resource}
	if p.anon && rule.Resource != ResourceOpen {
		return deny(CodeUnauthenticated, rule.Action, t, "authentication required", "no credentials")
	}
	if rule.Extract != nil {
		var ok bool
		if t, ok = rule.Extract(req); !ok {
			return deny(CodePermissionDenied, rule.Action, Target{Kind: rule.Resource},
				"request message does not match the method", fmt.Sprintf("request of type %T", req))
		}
		t.Kind = rule.Resource
	}
	return p.authorize(rule.Action, p.resolve(t, r), r)
}

// AuthorizeAll decides one action on many targets, for batch and
// multi-object operations: every target is checked, and the whole
// operation is refused if any one is. Workload targets without a queue
// are resolved with r. The refusal is the first failing target's, its
// Basis prefixed with that target's position.
func (p *Principal) AuthorizeAll(act Action, targets []Target, r Resolvers) Decision {
	if p.anon && act != ActHealthCheck {
		return deny(CodeUnauthenticated, act, Target{}, "authentication required", "no credentials")
	}
	for i, t := range targets {
		d := p.authorize(act, p.resolve(t, r), r)
		if !d.Allowed {
			d.Basis = "target " + strconv.Itoa(i+1) + " of " + strconv.Itoa(len(targets)) + ": " + d.Basis
			return d
		}
	}
	return allow(act, Target{}, "all "+strconv.Itoa(len(targets))+" targets allowed")
}

// resolve fills in a workload's queue and a token's owner.
func (p *Principal) resolve(t Target, r Resolvers) Target {
	switch {
	case t.Workload != "" && t.Queue == "" && r.Workloads != nil:
		if q, ok := r.Workloads.QueueOf(t.Workload); ok {
			t.Queue = q
		}
	case t.Token != "" && t.Owner == "" && r.Tokens != nil:
		if o, ok := r.Tokens.TokenOwner(t.Token); ok {
			t.Owner = o
		}
	}
	return t
}

func (p *Principal) authorize(act Action, t Target, r Resolvers) Decision {
	if p.anon && act != ActHealthCheck {
		return deny(CodeUnauthenticated, act, t, "authentication required", "no credentials")
	}
	switch act {
	case ActHealthCheck:
		return allow(act, t, basisOpen)
	case ActReflection, ActAdminGetLeader, ActAdminGetHealth, ActAdminWhoAmI, ActClusterList, ActClusterGet:
		return allow(act, t, basisAuthenticated)
	case ActWorkloadList, ActWorkloadWatch, ActQueueList:
		return allow(act, t, basisFiltered)
	case ActClusterDrain, ActClusterResume, ActClusterRegister, ActClusterRevoke, ActClusterCreds:
		return p.global(act, t, PermClustersManage)
	case ActAuditList:
		return p.global(act, t, PermAuditRead)
	case ActWorkloadSubmit:
		return p.submit(t)
	case ActWorkloadGet, ActWorkloadExplain:
		return p.onWorkload(act, t, vView, PermWorkloadsViewAll, nil)
	case ActWorkloadCancel:
		return p.onWorkload(act, t, vCancel, PermWorkloadsCancelAny, r.Workloads)
	case ActQueueGet:
		return p.getQueue(t)
	case ActQueueCreate:
		return p.createQueue(t)
	case ActQueueUpdate:
		return p.updateQueue(t)
	case ActQueueDelete:
		return p.deleteQueue(t)
	case ActTokenCreate:
		return p.mint(t)
	case ActTokenList:
		d := allow(act, t, basisTokenList)
		d.OwnOnly = !p.perms.has(PermAdmin)
		return d
	case ActTokenRevoke:
		return p.revoke(t)
	}
	return deny(CodePermissionDenied, act, t, "action "+string(act)+" is not permitted", "unknown action")
}

func (p *Principal) global(act Action, t Target, perm Permission) Decision {
	if p.perms.has(perm) {
		return allow(act, t, "global permission "+string(perm))
	}
	return deny(CodePermissionDenied, act, t,
		"this needs the "+string(perm)+" permission", "missing global permission "+string(perm))
}

// queueNotFound is the refusal for a queue the caller may not see.
func queueNotFound(act Action, t Target, path, basis string) Decision {
	reason := QueueNotFound(path)
	if path == "" {
		reason = "queue not found: no queue path given"
	}
	return deny(CodeNotFound, act, t, reason, basis)
}

// submit: submit on the queue or an ancestor, or workloads.submit_any;
// then the priority ceiling. admin is exempt from ceilings.
func (p *Principal) submit(t Target) Decision {
	const act = ActWorkloadSubmit
	if p.perms.has(PermAdmin) {
		return allow(act, t, basisAdmin)
	}
	acc := p.accessTo(t.Queue)
	basis := basisSubmitACL
	if acc.verbs&vSubmit == 0 {
		if !p.perms.has(PermWorkloadsSubmitAny) {
			if acc.verbs&vView == 0 && !p.perms.has(PermWorkloadsViewAll) {
				return queueNotFound(act, t, t.Queue, "no submit on the queue or an ancestor, and it is not visible to the caller")
			}
			return deny(CodePermissionDenied, act, t,
				"you may not submit to queue "+t.Queue+": it needs submit on the queue or an ancestor, or the workloads.submit_any permission",
				"no submit on the queue or an ancestor, no workloads.submit_any")
		}
		basis = basisSubmitAny
	}
	if acc.n == nil {
		return allow(act, t, basis)
	}
	maxPrio, hasMax, nonPreemptOK := acc.ceiling()
	if hasMax && t.Priority > maxPrio {
		return deny(CodePermissionDenied, act, t,
			fmt.Sprintf("priority %d is above the ceiling %d of queue %s", t.Priority, maxPrio, t.Queue),
			fmt.Sprintf("priority ceiling %d (%s)", maxPrio, basis))
	}
	if !t.Preemptible && !nonPreemptOK {
		return deny(CodePermissionDenied, act, t,
			"queue "+t.Queue+" accepts only preemptible work; set preemptible to true",
			"non-preemptible work forbidden by a ceiling on the path ("+basis+")")
	}
	return allow(act, t, basis)
}

// ceiling is the strictest priority ceiling and non-preemptible policy
// along the path that binds the principal: every ceiling except those set
// on queues strictly below the shallowest queue it manages (ceilings it
// could change itself).
func (acc access) ceiling() (maxPrio int32, hasMax, nonPreemptOK bool) {
	nonPreemptOK = true
	for d := 0; d < acc.n.depth; d++ {
		if acc.manageDepth > 0 && d+1 > acc.manageDepth {
			break
		}
		c := acc.n.chain[d]
		if c == nil {
			continue
		}
		if c.hasMaxPrio && (!hasMax || c.maxPrio < maxPrio) {
			maxPrio, hasMax = c.maxPrio, true
		}
		if c.nonPreempt < 0 {
			nonPreemptOK = false
		}
	}
	return maxPrio, hasMax, nonPreemptOK
}

// onWorkload: need on the workload's queue or an ancestor, or anyPerm. A
// workload that does not exist and one the caller may not see get the
// same answer. A submitter may cancel its own workloads.
func (p *Principal) onWorkload(act Action, t Target, need verbSet, anyPerm Permission, owners WorkloadResolver) Decision {
	if t.Queue == "" {
		return deny(CodeNotFound, act, t, WorkloadNotFound(t.Workload), "workload not found")
	}
	if p.perms.has(anyPerm) {
		if p.perms.has(PermAdmin) {
			return allow(act, t, basisAdmin)
		}
		if anyPerm == PermWorkloadsViewAll {
			return allow(act, t, basisViewAll)
		}
		return allow(act, t, basisCancelAny)
	}
	acc := p.accessTo(t.Queue)
	if acc.verbs&need != 0 {
		if need == vView {
			return allow(act, t, basisViewACL)
		}
		return allow(act, t, basisCancelACL)
	}
	if act == ActWorkloadCancel && acc.verbs&vSubmit != 0 && p.subject.User != "" {
		owner := t.Owner
		if owner == "" {
			if o, ok := owners.(WorkloadOwnerResolver); ok {
				owner, _ = o.OwnerOf(t.Workload)
			}
		}
		if owner == p.subject.User {
			return allow(act, t, basisCancelOwn)
		}
	}
	if acc.verbs&vView == 0 && !p.perms.has(PermWorkloadsViewAll) {
		return deny(CodeNotFound, act, t, WorkloadNotFound(t.Workload), "workload's queue is not visible to the caller")
	}
	return deny(CodePermissionDenied, act, t,
		"you may not cancel workload "+t.Workload+": it needs cancel on its queue or an ancestor, or the workloads.cancel_any permission",
		"no cancel on the queue or an ancestor, not the submitter, no workloads.cancel_any")
}

func (p *Principal) getQueue(t Target) Decision {
	const act = ActQueueGet
	if p.perms.has(PermWorkloadsViewAll) {
		return allow(act, t, basisViewAll)
	}
	if p.accessTo(t.Queue).verbs&vView != 0 {
		return allow(act, t, basisViewACL)
	}
	return queueNotFound(act, t, t.Queue, "queue not visible to the caller")
}

// visible reports whether the principal may see a queue it holds acc on.
func (p *Principal) visible(acc access) bool {
	return acc.verbs&vView != 0 || p.perms.has(PermWorkloadsViewAll)
}

// createQueue: queues.create for a top-level queue; manage on the parent
// (or above) for a child.
func (p *Principal) createQueue(t Target) Decision {
	const act = ActQueueCreate
	if p.perms.has(PermAdmin) {
		return allow(act, t, basisAdmin)
	}
	if !strings.Contains(t.Queue, "/") {
		if p.perms.has(PermQueuesCreate) {
			return allow(act, t, basisCreateTop)
		}
		return deny(CodePermissionDenied, act, t,
			"creating a top-level queue needs the queues.create permission", "missing global permission queues.create")
	}
	parent := parentOf(t.Queue)
	acc := p.accessTo(parent)
	if acc.verbs&vManage != 0 {
		return allow(act, t, basisManageParent)
	}
	if !p.visible(acc) {
		return queueNotFound(act, t, parent, "parent queue not visible to the caller")
	}
	return deny(CodePermissionDenied, act, t,
		"creating a queue under "+parent+" needs manage on "+parent+" or an ancestor",
		"no manage on the parent or an ancestor")
}

// updateQueue checks each field the update touches against its rule:
// description needs update; weight, quotas and the ceiling need manage
// strictly above (queues.create for a top-level queue); the access list
// needs manage on the queue or above; an unknown field needs both.
func (p *Principal) updateQueue(t Target) Decision {
	const act = ActQueueUpdate
	if p.perms.has(PermAdmin) {
		return allow(act, t, basisAdmin)
	}
	fields := t.Fields
	if fields == 0 {
		fields = FieldDescription
	}
	path := t.Queue
	top := !strings.Contains(path, "/")
	acc := p.accessTo(path)
	manageHere := acc.verbs&vManage != 0
	var manageAbove bool
	if top {
		manageAbove = p.perms.has(PermQueuesCreate)
	} else {
		manageAbove = acc.manageDepth > 0 && acc.manageDepth < depthOf(path)
	}
	var reason, basis string
	switch {
	case fields&FieldUnknown != 0 && !(manageAbove && manageHere):
		reason, basis = "updating this field of queue "+path+" needs manage on the queue and "+above(top), "unknown field needs manage here and above"
	case fields&FieldAccess != 0 && !manageHere:
		reason, basis = "changing the access list of queue "+path+" needs manage on the queue or an ancestor", "access list needs manage on the queue or an ancestor"
	case fields&fromAbove != 0 && !manageAbove:
		name := (fields & fromAbove).Names()[0]
		reason = "changing the " + name + " of queue " + path + " needs " + above(top) +
			": quotas, weights and priority ceilings are set from above"
		basis = name + " needs manage strictly above the queue"
	case fields&FieldDescription != 0 && acc.verbs&vUpdate == 0 && !(top && p.perms.has(PermQueuesCreate)):
		reason, basis = "updating queue "+path+" needs update on the queue or an ancestor", "description needs update"
	default:
		return allow(act, t, basisUpdate)
	}
	if !p.visible(acc) {
		return queueNotFound(act, t, path, "queue not visible to the caller; "+basis)
	}
	return deny(CodePermissionDenied, act, t, reason, basis)
}

func above(top bool) string {
	if top {
		return "the queues.create permission"
	}
	return "manage on a queue above it"
}

// deleteQueue: manage strictly above; for a top-level queue,
// queues.create together with manage on the queue itself.
func (p *Principal) deleteQueue(t Target) Decision {
	const act = ActQueueDelete
	if p.perms.has(PermAdmin) {
		return allow(act, t, basisAdmin)
	}
	path := t.Queue
	acc := p.accessTo(path)
	if !strings.Contains(path, "/") {
		if p.perms.has(PermQueuesCreate) && acc.verbs&vManage != 0 {
			return allow(act, t, basisDeleteTop)
		}
		if !p.visible(acc) {
			return queueNotFound(act, t, path, "queue not visible to the caller")
		}
		return deny(CodePermissionDenied, act, t,
			"deleting a top-level queue needs the queues.create permission and manage on the queue",
			"top-level delete needs queues.create and manage on the queue")
	}
	if acc.manageDepth > 0 && acc.manageDepth < depthOf(path) {
		return allow(act, t, basisManageParent)
	}
	if !p.visible(acc) {
		return queueNotFound(act, t, path, "queue not visible to the caller")
	}
	return deny(CodePermissionDenied, act, t,
		"deleting queue "+path+" needs manage on a queue above it", "no manage strictly above the queue")
}

// mint: tokens.create, and every requested permission held by the caller.
func (p *Principal) mint(t Target) Decision {
	const act = ActTokenCreate
	if !p.perms.has(PermTokensCreate) {
		return deny(CodePermissionDenied, act, t, "creating API tokens needs the tokens.create permission", "missing global permission tokens.create")
	}
	if d := p.CanGrant(t.Permissions); !d.Allowed {
		d.Action, d.Target = act, t
		return d
	}
	if p.perms.has(PermAdmin) {
		return allow(act, t, basisTokenMint)
	}
	// A token acts in access lists as its user and groups: naming another
	// user or a group the caller is not in would borrow their queue rights.
	if t.Owner != "" && t.Owner != p.subject.User {
		return deny(CodePermissionDenied, act, t,
			"a token may act only as its creator ("+p.subject.User+") unless you are admin", "token user is not the caller")
	}
	for i, g := range t.Groups {
		if !contains(p.subject.Groups, g) {
			return deny(CodePermissionDenied, act, t,
				"token.groups["+strconv.Itoa(i)+"]: you are not in group "+strconv.Quote(g), "token group the caller is not in")
		}
	}
	return allow(act, t, basisTokenMint)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// CanGrant decides whether the principal may bind these permissions to a
// new API token: it must hold each of them itself (admin holds all, and
// only admin may grant admin).
func (p *Principal) CanGrant(perms []string) Decision {
	const act = ActTokenCreate
	for i, s := range perms {
		perm, err := ParsePermission(s)
		if err != nil {
			return deny(CodePermissionDenied, act, Target{}, "permissions["+strconv.Itoa(i)+"]: "+err.Error(), "unknown permission requested")
		}
		if !p.perms.has(perm) {
			return deny(CodePermissionDenied, act, Target{},
				"you cannot grant "+strconv.Quote(string(perm))+" to a token: you do not hold it",
				"requested permission "+string(perm)+" not held by the caller")
		}
	}
	return allow(act, Target{}, basisTokenMint)
}

// revoke: the token's own user, or admin. Anyone else, and a token that
// does not exist, get the same "not found".
func (p *Principal) revoke(t Target) Decision {
	const act = ActTokenRevoke
	if p.perms.has(PermAdmin) {
		return allow(act, t, basisAdmin)
	}
	if t.Owner != "" && t.Owner == p.subject.User {
		return allow(act, t, basisTokenOwn)
	}
	return deny(CodeNotFound, act, t, TokenNotFound(t.Token), "not the token's user, not admin (or no such token)")
}
