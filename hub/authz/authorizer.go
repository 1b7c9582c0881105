package authz

import (
	"errors"
	"strings"
)

// Authorizer holds a compiled Config and queue snapshot. It is immutable
// and safe for concurrent use; build a new one (WithQueues) when queues
// change and swap it in atomically.
type Authorizer struct {
	cfgUsers  map[string]permSet
	cfgGroups map[string]permSet

	// Subjects by name: their global permissions (users and groups, from
	// the Config) and their interned access-list id (-1 when no access
	// list names them).
	users  map[string]subjectInfo
	groups map[string]subjectInfo
	tokens map[string]int32
	nIDs   int
	// groupFilter has a bit set for every known group name's nameHash, so
	// Bind skips the map lookup for most of a subject's unrelated groups.
	groupFilter [groupFilterWords]uint64

	nodes  map[string]*node
	sorted []*node // by path
}

type subjectInfo struct {
	perms permSet
	id    int32
}

// New validates cfg and queues and compiles them. A nil cfg grants no
// global permissions.
func New(cfg *Config, queues Queues) (*Authorizer, error) {
	if err := errors.Join(cfg.Validate(), queues.Validate()); err != nil {
		return nil, err
	}
	a := &Authorizer{cfgUsers: map[string]permSet{}, cfgGroups: map[string]permSet{}}
	if cfg != nil {
		for name, perms := range cfg.UserPermissions {
			a.cfgUsers[name] = permsOf(perms)
		}
		for name, perms := range cfg.GroupPermissions {
			a.cfgGroups[name] = permsOf(perms)
		}
	}
	a.compileQueues(queues)
	return a, nil
}

// WithQueues returns a new Authorizer with the same Config and a new queue
// snapshot. The receiver is unchanged.
func (a *Authorizer) WithQueues(queues Queues) (*Authorizer, error) {
	if err := queues.Validate(); err != nil {
		return nil, err
	}
	b := &Authorizer{cfgUsers: a.cfgUsers, cfgGroups: a.cfgGroups}
	b.compileQueues(queues)
	return b, nil
}

// compileQueues interns every subject, compiles each queue's access list
// and links each node to its ancestors. queues must be valid.
func (a *Authorizer) compileQueues(queues Queues) {
	a.users = make(map[string]subjectInfo, len(a.cfgUsers))
	a.groups = make(map[string]subjectInfo, len(a.cfgGroups))
	a.tokens = map[string]int32{}
	for name, p := range a.cfgUsers {
		a.users[name] = subjectInfo{perms: p, id: -1}
	}
	for name, p := range a.cfgGroups {
		a.groups[name] = subjectInfo{perms: p, id: -1}
	}
	a.nodes = make(map[string]*node, len(queues))
	a.sorted = make([]*node, 0, len(queues))
	// Paths in sorted order, so ids are assigned deterministically.
	for _, path := range sortedKeys(queues) {
		pol := queues[path]
		n := &node{path: path, depth: depthOf(path)}
		for _, e := range pol.Access {
			ref, _ := ParseSubjectRef(e.Subject)
			var vs verbSet
			for _, v := range e.Verbs {
				b, _ := verbBit(v)
				vs |= b
			}
			n.acl = append(n.acl, aclEntry{id: a.intern(ref), verbs: vs.closed()})
		}
		if pol.MaxPriority != nil {
			n.hasMaxPrio, n.maxPrio = true, *pol.MaxPriority
		}
		if pol.AllowNonPreemptible != nil {
			n.nonPreempt = -1
			if *pol.AllowNonPreemptible {
				n.nonPreempt = 1
			}
		}
		a.nodes[path] = n
		a.sorted = append(a.sorted, n)
	}
	for g := range a.groups {
		h := nameHash(g)
		a.groupFilter[h>>6] |= 1 << (h & 63)
	}
	for _, n := range a.sorted {
		p := n.path
		for d := n.depth; d >= 1; d-- {
			n.chain[d-1] = a.nodes[p]
			p = parentOf(p)
		}
	}
}

const groupFilterWords = 64 // 4096 bits

// nameHash is a cheap hash of a name's length and three of its bytes.
func nameHash(s string) uint32 {
	if s == "" {
		return 0
	}
	h := uint32(len(s))*0x9e3779b1 ^ uint32(s[0])*0x85ebca6b ^ uint32(s[len(s)/2])*0xc2b2ae35 ^ uint32(s[len(s)-1])*0x27d4eb2f
	return (h ^ h>>15) % (groupFilterWords * 64)
}

func (a *Authorizer) mayKnowGroup(g string) bool {
	h := nameHash(g)
	return a.groupFilter[h>>6]&(1<<(h&63)) != 0
}

func (a *Authorizer) intern(ref SubjectRef) int32 {
	switch ref.Kind {
	case KindUser:
		si, ok := a.users[ref.Name]
		if !ok || si.id < 0 {
			si.id = int32(a.nIDs)
			a.nIDs++
			a.users[ref.Name] = si
		}
		return si.id
	case KindGroup:
		si, ok := a.groups[ref.Name]
		if !ok || si.id < 0 {
			si.id = int32(a.nIDs)
			a.nIDs++
			a.groups[ref.Name] = si
		}
		return si.id
	default:
		id, ok := a.tokens[ref.Name]
		if !ok {
			id = int32(a.nIDs)
			a.nIDs++
			a.tokens[ref.Name] = id
		}
		return id
	}
}

// lookup returns the node of path or of its nearest ancestor that has a
// policy; nil when none has or the path is malformed.
func (a *Authorizer) lookup(path string) *node {
	if !validQueuePath(path) {
		return nil
	}
	for {
		if n, ok := a.nodes[path]; ok {
			return n
		}
		i := strings.LastIndexByte(path, '/')
		if i < 0 {
			return nil
		}
		path = path[:i]
	}
}

// Principal is a Subject bound to one Authorizer: its global permissions
// and the access-list subjects it matches, computed once per request.
// It is immutable and safe for concurrent use.
type Principal struct {
	a       *Authorizer
	subject Subject
	anon    bool
	perms   permSet
	ids     []uint64 // bit set of interned access-list ids
}

// Bind computes what s holds under this Authorizer. Call it once per
// request; every question about that request then goes to the Principal.
func (a *Authorizer) Bind(s Subject) *Principal {
	p := &Principal{a: a, subject: s}
	if s.Anonymous() {
		p.anon = true
		return p
	}
	if a.nIDs > 0 {
		p.ids = make([]uint64, (a.nIDs+63)/64)
	}
	token := s.IsToken()
	if token {
		for _, perm := range s.TokenPermissions {
			if b, ok := permBit(perm); ok {
				p.perms |= b
			}
		}
		if id, ok := a.tokens[s.TokenID]; ok {
			p.setID(id)
		}
	}
	if s.User != "" {
		if si, ok := a.users[s.User]; ok {
			if !token {
				p.perms |= si.perms
			}
			p.setID(si.id)
		}
	}
	for _, g := range s.Groups {
		if !a.mayKnowGroup(g) {
			continue
		}
		if si, ok := a.groups[g]; ok {
			if !token {
				p.perms |= si.perms
			}
			p.setID(si.id)
		}
	}
	return p
}

func (p *Principal) setID(id int32) {
	if id >= 0 {
		p.ids[id>>6] |= 1 << (uint(id) & 63)
	}
}

func (p *Principal) hasID(id int32) bool {
	w := int(id >> 6)
	return w < len(p.ids) && p.ids[w]&(1<<(uint(id)&63)) != 0
}

// Subject returns the subject the principal was bound from.
func (p *Principal) Subject() Subject { return p.subject }

// Anonymous reports whether the principal carries no identity.
func (p *Principal) Anonymous() bool { return p.anon }

// Has reports whether the principal holds a global permission (admin holds
// every one).
func (p *Principal) Has(perm Permission) bool { return p.perms.has(perm) }

// Permissions lists the global permissions the principal holds, as
// granted (admin is not expanded).
func (p *Principal) Permissions() []Permission { return p.perms.list() }

// access is what a principal holds on one queue path.
type access struct {
	n *node
	// verbs on the path, inherited from every ancestor, implications
	// applied.
	verbs verbSet
	// manageDepth is the depth of the shallowest queue on the path where
	// the principal holds manage (0: nowhere).
	manageDepth int
}

// accessTo computes the principal's verbs on path from the access lists
// of the path and its ancestors.
func (p *Principal) accessTo(path string) access {
	n := p.a.lookup(path)
	if n == nil || p.ids == nil {
		return access{n: n}
	}
	acc := access{n: n}
	for d := 0; d < n.depth; d++ {
		c := n.chain[d]
		if c == nil {
			continue
		}
		for _, e := range c.acl {
			if p.hasID(e.id) {
				acc.verbs |= e.verbs
				if e.verbs&vManage != 0 && acc.manageDepth == 0 {
					acc.manageDepth = d + 1
				}
			}
		}
	}
	return acc
}

// QueueVerbs lists the verbs the principal holds on a queue path through
// access lists (global permissions aside), implications applied.
func (p *Principal) QueueVerbs(path string) []Verb { return p.accessTo(path).verbs.list() }

// CanView reports whether the principal may see the queue at path and its
// workloads: workloads.view_all (or admin), or view on the queue or an
// ancestor. It is the per-item check for lists and watches.
func (p *Principal) CanView(path string) bool {
	if p.anon {
		return false
	}
	if p.perms.has(PermWorkloadsViewAll) {
		return true
	}
	return p.accessTo(path).verbs&vView != 0
}

// ViewFilter answers, per item, whether a principal may see a queue or a
// workload in a list or a watch. It is immutable and cheap to copy.
type ViewFilter struct {
	p   *Principal
	all bool
}

// Filter returns the principal's view filter.
func (p *Principal) Filter() ViewFilter {
	return ViewFilter{p: p, all: !p.anon && p.perms.has(PermWorkloadsViewAll)}
}

// All reports whether every queue is visible (workloads.view_all or admin),
// so a caller may skip the per-item check.
func (f ViewFilter) All() bool { return f.all }

// Visible reports whether the queue at path (or a workload in it) is
// visible.
func (f ViewFilter) Visible(path string) bool {
	if f.all {
		return true
	}
	if f.p == nil || f.p.anon {
		return false
	}
	return f.p.accessTo(path).verbs&vView != 0
}

// Prefixes returns the sorted set of queue paths whose subtrees are
// exactly what the principal may see, for a store range scan; nil with
// All. Every path at or below a returned prefix is visible, nothing else
// is, and no returned prefix lies below another.
func (f ViewFilter) Prefixes() []string {
	if f.all || f.p == nil || f.p.anon || f.p.ids == nil {
		return nil
	}
	roots := map[string]bool{}
	var out []string
	for _, n := range f.p.a.sorted { // sorted: an ancestor comes before its descendants
		granted := false
		for _, e := range n.acl {
			if e.verbs&vView != 0 && f.p.hasID(e.id) {
				granted = true
				break
			}
		}
		if !granted {
			continue
		}
		covered := false
		for q := parentOf(n.path); q != ""; q = parentOf(q) {
			if roots[q] {
				covered = true
				break
			}
		}
		if !covered {
			roots[n.path] = true
			out = append(out, n.path)
		}
	}
	return out
}
