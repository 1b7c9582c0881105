package authz

import (
	"strings"
)

// treeBuilder builds a Queues snapshot fluently:
//
//	makeTree().Queue("acme", "group:acme-admins=manage").MaxPriority("acme", 1000).Obj()
type treeBuilder struct{ q Queues }

func makeTree() *treeBuilder { return &treeBuilder{q: Queues{}} }

// Queue adds a queue with entries written "kind:name=verb,verb".
func (b *treeBuilder) Queue(path string, entries ...string) *treeBuilder {
	p := b.q[path]
	for _, e := range entries {
		subj, verbs, _ := strings.Cut(e, "=")
		ent := Entry{Subject: subj}
		for _, v := range strings.Split(verbs, ",") {
			ent.Verbs = append(ent.Verbs, Verb(v))
		}
		p.Access = append(p.Access, ent)
	}
	b.q[path] = p
	return b
}

func (b *treeBuilder) MaxPriority(path string, max int32) *treeBuilder {
	p := b.q[path]
	p.MaxPriority = &max
	b.q[path] = p
	return b
}

func (b *treeBuilder) NonPreemptible(path string, allowed bool) *treeBuilder {
	p := b.q[path]
	p.AllowNonPreemptible = &allowed
	b.q[path] = p
	return b
}

func (b *treeBuilder) Obj() Queues { return b.q }

// subjectBuilder builds a Subject fluently: user("bob").In("ml").Obj().
type subjectBuilder struct{ s Subject }

func user(name string) *subjectBuilder { return &subjectBuilder{s: Subject{User: name}} }

// token is an API token acting for owner with the given permissions.
func token(id, owner string, perms ...Permission) *subjectBuilder {
	return &subjectBuilder{s: Subject{User: owner, TokenID: id, TokenPermissions: perms}}
}

func anonymous() *subjectBuilder { return &subjectBuilder{} }

func (b *subjectBuilder) In(groups ...string) *subjectBuilder {
	b.s.Groups = append(b.s.Groups, groups...)
	return b
}

func (b *subjectBuilder) Obj() Subject { return b.s }

// targets
func queueT(path string) Target { return Target{Kind: ResourceQueue, Queue: path} }

func submitT(path string, prio int32, preemptible bool) Target {
	return Target{Kind: ResourceQueue, Queue: path, Priority: prio, Preemptible: preemptible}
}

func updateT(path string, f QueueFields) Target {
	return Target{Kind: ResourceQueue, Queue: path, Fields: f}
}

func workloadT(id string) Target { return Target{Kind: ResourceWorkload, Workload: id} }

// fakeResolver resolves workloads and tokens from maps.
type fakeResolver struct {
	queues map[string]string // workload id -> queue
	owners map[string]string // workload id -> submitter
	tokens map[string]string // token id -> user
}

func (r fakeResolver) QueueOf(id string) (string, bool) { q, ok := r.queues[id]; return q, ok }
func (r fakeResolver) OwnerOf(id string) (string, bool) { o, ok := r.owners[id]; return o, ok }
func (r fakeResolver) TokenOwner(id string) (string, bool) {
	o, ok := r.tokens[id]
	return o, ok
}

func (r fakeResolver) resolvers() Resolvers { return Resolvers{Workloads: r, Tokens: r} }

// The standard fixture: a platform with two tenants.
func stdConfig() *Config {
	return &Config{
		GroupPermissions: map[string][]string{
			"platform":   {"admin"},
			"onboarding": {"queues.create"},
			"ops":        {"clusters.manage"},
			"viewers":    {"workloads.view_all"},
			"ci":         {"workloads.submit_any"},
			"janitors":   {"workloads.cancel_any"},
			"auditors":   {"audit.read"},
			"minters":    {"tokens.create", "workloads.view_all"},
		},
		UserPermissions: map[string][]string{"root": {"admin"}},
	}
}

func stdTree() Queues {
	return makeTree().
		Queue("acme", "group:acme-admins=manage", "user:onboarder=manage").
		MaxPriority("acme", 1000).
		Queue("acme/vision", "group:vision=submit", "user:val=view", "user:upd=update",
			"token:tok1=submit", "user:canceller=cancel").
		MaxPriority("acme/vision", 100).
		Queue("acme/vision/train", "user:trainer=submit", "group:vision-leads=manage").
		NonPreemptible("acme/vision/train", false).
		Queue("acme/nlp", "group:nlp=submit").
		Queue("globex", "group:globex-admins=manage").
		Queue("globex/x").
		Obj()
}

func stdResolver() fakeResolver {
	return fakeResolver{
		queues: map[string]string{
			"w-vision": "acme/vision", "w-train": "acme/vision/train",
			"w-nlp": "acme/nlp", "w-globex": "globex/x", "w-orphan": "acme/vision/gone",
		},
		owners: map[string]string{"w-vision": "alice", "w-train": "trainer", "w-nlp": "nina"},
		tokens: map[string]string{"tok-alice": "alice", "tok-bob": "bob"},
	}
}

// fataler is what testing.TB and *rapid.T share.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

func mustNew(t fataler, cfg *Config, q Queues) *Authorizer {
	t.Helper()
	a, err := New(cfg, q)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return a
}
