package authz

import (
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
)

// Code classifies a Decision the way the caller must be answered.
type Code uint8

// The decision codes.
const (
	// CodeOK: allowed.
	CodeOK Code = iota
	// CodeUnauthenticated: the request carries no identity and the action
	// needs one.
	CodeUnauthenticated
	// CodePermissionDenied: the caller may see the target but not do this
	// to it (or the action needs a global permission it lacks).
	CodePermissionDenied
	// CodeNotFound: the target does not exist, or the caller may not see
	// it; the two are deliberately indistinguishable.
	CodeNotFound
)

var codeNames = [...]string{"OK", "Unauthenticated", "PermissionDenied", "NotFound"}

func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("Code(%d)", int(c))
}

// GRPCCode is the gRPC status code to answer a refused call with.
func (c Code) GRPCCode() codes.Code {
	switch c {
	case CodeOK:
		return codes.OK
	case CodeUnauthenticated:
		return codes.Unauthenticated
	case CodeNotFound:
		return codes.NotFound
	}
	return codes.PermissionDenied
}

// Action is what a request does, as recorded in the audit log.
type Action string

// The actions. Each RPC maps to exactly one (see Table).
const (
	ActWorkloadSubmit  Action = "workloads.submit"
	ActWorkloadGet     Action = "workloads.get"
	ActWorkloadList    Action = "workloads.list"
	ActWorkloadCancel  Action = "workloads.cancel"
	ActWorkloadExplain Action = "workloads.explain"
	ActWorkloadWatch   Action = "workloads.watch"

	ActQueueCreate Action = "queues.create"
	ActQueueUpdate Action = "queues.update"
	ActQueueGet    Action = "queues.get"
	ActQueueList   Action = "queues.list"
	ActQueueDelete Action = "queues.delete"

	ActClusterList     Action = "clusters.list"
	ActClusterGet      Action = "clusters.get"
	ActClusterDrain    Action = "clusters.drain"
	ActClusterResume   Action = "clusters.resume"
	ActClusterRegister Action = "clusters.register"
	ActClusterRevoke   Action = "clusters.revoke_credentials"
	ActClusterCreds    Action = "clusters.list_credentials"

	ActAdminGetLeader Action = "admin.get_leader"
	ActAdminGetHealth Action = "admin.get_health"
	ActAdminWhoAmI    Action = "admin.whoami"

	ActTokenCreate Action = "tokens.create"
	ActTokenList   Action = "tokens.list"
	ActTokenRevoke Action = "tokens.revoke"

	ActAuditList Action = "audit.list"

	ActHealthCheck Action = "health.check"
	ActReflection  Action = "reflection.query"
)

// ResourceKind is what an action is checked against.
type ResourceKind uint8

// The resource kinds.
const (
	// ResourceOpen: anyone, even an anonymous caller (health only).
	ResourceOpen ResourceKind = iota
	// ResourceAuthenticated: any authenticated caller.
	ResourceAuthenticated
	// ResourceFiltered: any authenticated caller; the results are filtered
	// per item with Principal.Filter (lists and watches).
	ResourceFiltered
	// ResourceGlobal: a global permission.
	ResourceGlobal
	// ResourceQueue: a queue path taken from the request.
	ResourceQueue
	// ResourceWorkload: a workload id; its queue comes from a
	// WorkloadResolver.
	ResourceWorkload
	// ResourceCluster: a cluster id; checked against clusters.manage.
	ResourceCluster
	// ResourceToken: an API token id; its owner comes from a TokenResolver.
	ResourceToken
)

var resourceNames = [...]string{"open", "authenticated", "filtered", "global", "queue", "workload", "cluster", "token"}

func (k ResourceKind) String() string {
	if int(k) < len(resourceNames) {
		return resourceNames[k]
	}
	return fmt.Sprintf("ResourceKind(%d)", int(k))
}

// QueueFields are the fields of a queue an update touches. They decide
// which rule applies (see docs/design/authorization.md, "Updating a
// queue").
type QueueFields uint8

// The queue fields, grouped by the rule that guards them.
const (
	// FieldDescription and other non-security fields: the update verb.
	FieldDescription QueueFields = 1 << iota
	// FieldWeight: manage strictly above (queues.create at the top).
	FieldWeight
	// FieldQuotas: manage strictly above (queues.create at the top).
	FieldQuotas
	// FieldCeiling (submit_policy: the priority ceiling and whether
	// non-preemptible work is allowed): manage strictly above
	// (queues.create at the top).
	FieldCeiling
	// FieldAccess (the access list): manage on the queue or an ancestor;
	// never queues.create alone.
	FieldAccess
	// FieldUnknown is a field this package does not know: it needs every
	// rule at once, so a new field is safe until it is classified.
	FieldUnknown

	// AllQueueFields is what an update without a field mask touches.
	AllQueueFields = FieldDescription | FieldWeight | FieldQuotas | FieldCeiling | FieldAccess
	// fromAbove are the fields set only from above.
	fromAbove = FieldWeight | FieldQuotas | FieldCeiling
)

var queueFieldNames = [...]string{"description", "weight", "quotas", "submit_policy", "access", "unknown field"}

// Names lists the fields, in a fixed order.
func (f QueueFields) Names() []string {
	var out []string
	for i, n := range queueFieldNames {
		if f&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return out
}

// QueueFieldsFromMask classifies update_mask paths. An empty mask means
// every field (as UpdateQueue does over gRPC). "path" and "revision" are
// identity and precondition, not updates. A sub-path such as
// "quotas.nominal" counts as its top-level field. Names are accepted in
// proto (snake_case) and JSON (lowerCamelCase) form.
func QueueFieldsFromMask(paths []string) QueueFields {
	if len(paths) == 0 {
		return AllQueueFields
	}
	var f QueueFields
	for _, p := range paths {
		top, _, _ := strings.Cut(p, ".")
		switch top {
		case "path", "revision":
		case "description":
			f |= FieldDescription
		case "weight":
			f |= FieldWeight
		case "quotas":
			f |= FieldQuotas
		case "submit_policy", "submitPolicy":
			f |= FieldCeiling
		case "access":
			f |= FieldAccess
		default:
			f |= FieldUnknown
		}
	}
	return f
}

// Target is what an action acts on, as extracted from the request (and,
// for a workload, resolved to its queue).
type Target struct {
	// Kind is the resource kind of the rule that produced the target.
	Kind ResourceKind
	// Queue is the queue path: of the queue itself, of the submitted
	// workload, or (after resolution) of the workload's queue. For a list or
	// watch, the queue prefix the request asked for.
	Queue string
	// Workload is the workload id.
	Workload string
	// Cluster is the cluster id.
	Cluster string
	// Token is the API token id.
	Token string
	// Owner is the user who submitted the workload, or who owns the token,
	// when a resolver knows it; for a new API token, the user it is to act
	// as.
	Owner string
	// Groups are the groups a new API token is to act in.
	Groups []string
	// Priority and Preemptible are the submitted workload's.
	Priority    int32
	Preemptible bool
	// Fields are the queue fields an update touches.
	Fields QueueFields
	// Permissions are the permissions a new API token asks for.
	Permissions []string
}

// String names the target for logs: "queue acme/vision",
// "workload 01J... (queue acme/vision)", "cluster gpu-east".
func (t Target) String() string {
	switch {
	case t.Workload != "" && t.Queue != "":
		return "workload " + t.Workload + " (queue " + t.Queue + ")"
	case t.Workload != "":
		return "workload " + t.Workload
	case t.Cluster != "":
		return "cluster " + t.Cluster
	case t.Token != "":
		return "token " + t.Token
	case t.Queue != "":
		return "queue " + t.Queue
	}
	return "-"
}

// Decision is the answer to one authorization question.
type Decision struct {
	// Allowed is true only for CodeOK.
	Allowed bool
	// Code says how to answer a refused call.
	Code Code
	// Reason is safe to return to the caller: it names only what the
	// caller sent or may already see, never another tenant's queue,
	// workload or access list.
	Reason string
	// Basis is the rule that decided, for the audit log, for example
	// "queue access list: submit on the queue or an ancestor".
	Basis string
	// Action and Target are what to record in the audit event.
	Action Action
	Target Target
	// OwnOnly is set on an allowed ListAPITokens: the caller may list only
	// its own tokens.
	OwnOnly bool
}

// GRPCCode is the gRPC status code for the decision.
func (d Decision) GRPCCode() codes.Code { return d.Code.GRPCCode() }

// Detail is the full explanation for the audit log: the action, the
// target (resolved queue included) and the rule that decided. It may name
// queues and workloads the caller cannot see; never return it to the
// caller.
func (d Decision) Detail() string {
	verdict := "allow"
	if !d.Allowed {
		verdict = "deny (" + d.Code.String() + ")"
	}
	s := verdict + " " + string(d.Action) + " on " + d.Target.String()
	if d.Basis != "" {
		s += ": " + d.Basis
	}
	return s
}

// QueueNotFound is the text of a "queue not found" answer. The hub's
// handlers use the same text, so a hidden queue and a missing one read
// alike.
func QueueNotFound(path string) string { return "queue " + path + " not found" }

// WorkloadNotFound is the text of a "workload not found" answer, shared with
// the hub's handlers.
func WorkloadNotFound(id string) string { return "workload " + id + " not found" }

// TokenNotFound is the text of a "token not found" answer.
func TokenNotFound(id string) string { return "API token " + id + " not found" }

func allow(act Action, t Target, basis string) Decision {
	return Decision{Allowed: true, Code: CodeOK, Action: act, Target: t, Basis: basis}
}

func deny(code Code, act Action, t Target, reason, basis string) Decision {
	return Decision{Code: code, Action: act, Target: t, Reason: reason, Basis: basis}
}
