package authz

import (
	"strconv"
	"strings"
)

// MaxDepth is the depth of the queue tree: tenant/team/project.
const MaxDepth = 3

// The priority range a workload may use (the API's validation range).
const (
	MinPriority int32 = -1_000_000
	MaxPriority int32 = 1_000_000
)

// Entry is one access-list entry: a subject and the verbs it holds on the
// queue and every queue below it.
type Entry struct {
	// Subject is "user:NAME", "group:NAME" or "token:ID".
	Subject string `json:"subject" yaml:"subject"`
	// Verbs are view, submit, cancel, update and manage.
	Verbs []Verb `json:"verbs" yaml:"verbs"`
}

// QueuePolicy is the security-relevant part of one queue: its access list
// and its priority ceiling. Both are inherited down the tree.
type QueuePolicy struct {
	// Access is the queue's own access list; entries of the ancestors
	// apply as well (grants only add up, nothing is ever revoked below).
	Access []Entry `json:"access,omitempty" yaml:"access,omitempty"`
	// MaxPriority is the highest priority its submitters may use; nil sets
	// none here. The strictest (lowest) value along the path applies.
	MaxPriority *int32 `json:"maxPriority,omitempty" yaml:"maxPriority,omitempty"`
	// AllowNonPreemptible says whether submitters may send work that is
	// not preemptible; nil sets nothing here. A false anywhere along the
	// path forbids it.
	AllowNonPreemptible *bool `json:"allowNonPreemptible,omitempty" yaml:"allowNonPreemptible,omitempty"`
}

// Queues is a snapshot of every queue's policy, keyed by queue path. A
// queue with no access list and no ceiling may be left out: a missing path
// inherits from its nearest ancestor present.
type Queues map[string]QueuePolicy

// QueuesFieldPrefix is the field path Validate's errors start with.
const QueuesFieldPrefix = "queues"

// Validate checks every path, subject, verb and ceiling; errors name the
// field, for example `queues["acme"].access[0].verbs[1]`.
func (q Queues) Validate() error {
	var fe fieldErrors
	for _, path := range sortedKeys(q) {
		field := QueuesFieldPrefix + "[" + strconv.Quote(path) + "]"
		if !validQueuePath(path) {
			fe.add(field, "invalid queue path %q: 1 to %d segments separated by '/', each a DNS-1123 label", path, MaxDepth)
		}
		p := q[path]
		p.validate(&fe, field)
	}
	return fe.err()
}

// Validate checks one queue's policy; field is the path of the policy in
// the caller's message (for example "queue"), so errors read
// "queue.access[0].subject: ...".
func (p QueuePolicy) Validate(field string) error {
	var fe fieldErrors
	p.validate(&fe, field)
	return fe.err()
}

func (p QueuePolicy) validate(fe *fieldErrors, field string) {
	seen := map[string]int{}
	for i, e := range p.Access {
		ef := field + ".access[" + strconv.Itoa(i) + "]"
		ref, err := ParseSubjectRef(e.Subject)
		if err != nil {
			fe.add(ef+".subject", "%v", err)
		} else if j, dup := seen[ref.String()]; dup {
			fe.add(ef+".subject", "subject %q is listed twice (also at access[%d]); merge the verbs into one entry", e.Subject, j)
		} else {
			seen[ref.String()] = i
		}
		if len(e.Verbs) == 0 {
			fe.add(ef+".verbs", "must name at least one verb (view, submit, cancel, update, manage)")
		}
		for k, v := range e.Verbs {
			if _, err := ParseVerb(string(v)); err != nil {
				fe.add(ef+".verbs["+strconv.Itoa(k)+"]", "%v", err)
			}
		}
	}
	if m := p.MaxPriority; m != nil && (*m < MinPriority || *m > MaxPriority) {
		fe.add(field+".maxPriority", "must be between %d and %d (got %d)", MinPriority, MaxPriority, *m)
	}
}

// validQueuePath reports whether path has 1 to MaxDepth segments, each
// matching [a-z0-9]([-a-z0-9]*[a-z0-9])? of at most 63 bytes. Paths that
// fail it match no access list: only global permissions apply to them.
func validQueuePath(path string) bool {
	if path == "" {
		return false
	}
	segs, segLen := 1, 0
	for i := 0; i < len(path); i++ {
		c := path[i]
		switch {
		case c == '/':
			if segLen == 0 || path[i-1] == '-' {
				return false
			}
			segs++
			if segs > MaxDepth {
				return false
			}
			segLen = 0
			continue
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-':
			if segLen == 0 {
				return false
			}
		default:
			return false
		}
		segLen++
		if segLen > 63 {
			return false
		}
	}
	return segLen > 0 && path[len(path)-1] != '-'
}

// depthOf counts the segments of a valid path.
func depthOf(path string) int { return strings.Count(path, "/") + 1 }

// parentOf returns the parent path, or "" for a top-level queue.
func parentOf(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[:i]
	}
	return ""
}

// aclEntry is a compiled access-list entry: an interned subject id and the
// verbs granted.
type aclEntry struct {
	id    int32
	verbs verbSet
}

// node is one queue of the compiled snapshot.
type node struct {
	path  string
	depth int
	// chain[d] is the node of this path's prefix at depth d+1 (chain[depth-1]
	// is the node itself); nil where that prefix has no policy.
	chain [MaxDepth]*node
	acl   []aclEntry
	// Ceiling set on this queue itself.
	hasMaxPrio bool
	maxPrio    int32
	// nonPreempt: 0 not set here, 1 allowed, -1 forbidden.
	nonPreempt int8
}
