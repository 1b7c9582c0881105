package authz

import (
	"testing"

	"pgregory.net/rapid"
)

// The universe the property tests draw from: a small tree and a few
// subjects, so draws collide often.
var (
	propPaths = func() []string {
		var out []string
		for _, t := range []string{"a", "b"} {
			out = append(out, t)
			for _, m := range []string{"x", "y"} {
				out = append(out, t+"/"+m)
				for _, p := range []string{"p", "q"} {
					out = append(out, t+"/"+m+"/"+p)
				}
			}
		}
		return out
	}()
	propUsers    = []string{"u1", "u2", "u3"}
	propGroups   = []string{"g1", "g2", "g3"}
	propTokens   = []string{"t1", "t2"}
	propSubjects = []string{"user:u1", "user:u2", "user:u3", "group:g1", "group:g2", "group:g3", "token:t1", "token:t2"}
	propPrios    = []int32{-5, 0, 50, 150, 5000}
)

// allActions lists every action authorize knows.
var allActions = []Action{
	ActWorkloadSubmit, ActWorkloadGet, ActWorkloadList, ActWorkloadCancel, ActWorkloadExplain, ActWorkloadWatch,
	ActQueueCreate, ActQueueUpdate, ActQueueGet, ActQueueList, ActQueueDelete,
	ActClusterList, ActClusterGet, ActClusterDrain, ActClusterResume, ActClusterRegister, ActClusterRevoke, ActClusterCreds,
	ActAdminGetLeader, ActAdminGetHealth, ActAdminWhoAmI, ActTokenCreate, ActTokenList, ActTokenRevoke,
	ActAuditList, ActHealthCheck, ActReflection,
}

// openToAnyAuthenticated are the actions any authenticated caller may
// take: they reveal nothing of any tenant (lists are filtered).
var openToAnyAuthenticated = map[Action]bool{
	ActWorkloadList: true, ActWorkloadWatch: true, ActQueueList: true,
	ActClusterList: true, ActClusterGet: true, ActAdminGetLeader: true, ActAdminGetHealth: true, ActAdminWhoAmI: true,
	ActTokenList: true, ActHealthCheck: true, ActReflection: true,
}

type query struct {
	act Action
	t   Target
}

// queries is a fixed battery of questions over the universe.
func queries() []query {
	var qs []query
	for _, p := range propPaths {
		for _, prio := range propPrios {
			qs = append(qs, query{ActWorkloadSubmit, Target{Queue: p, Priority: prio, Preemptible: true}},
				query{ActWorkloadSubmit, Target{Queue: p, Priority: prio}})
		}
		wl := Target{Queue: p, Workload: "w-" + p}
		owned := Target{Queue: p, Workload: "w-" + p, Owner: "u1"}
		qs = append(qs, query{ActWorkloadGet, wl}, query{ActWorkloadExplain, wl},
			query{ActWorkloadCancel, wl}, query{ActWorkloadCancel, owned},
			query{ActQueueGet, Target{Queue: p}}, query{ActQueueCreate, Target{Queue: p}},
			query{ActQueueDelete, Target{Queue: p}})
		for _, f := range []QueueFields{FieldDescription, FieldWeight, FieldQuotas, FieldCeiling, FieldAccess, FieldUnknown, AllQueueFields, 0} {
			qs = append(qs, query{ActQueueUpdate, Target{Queue: p, Fields: f}})
		}
	}
	for _, act := range allActions {
		switch act {
		case ActWorkloadSubmit, ActWorkloadGet, ActWorkloadExplain, ActWorkloadCancel, ActQueueGet, ActQueueCreate, ActQueueDelete, ActQueueUpdate:
		default:
			qs = append(qs, query{act, Target{Cluster: "c1", Token: "tok-u1", Owner: "u1"}})
		}
	}
	qs = append(qs, query{ActTokenCreate, Target{Permissions: []string{"audit.read", "workloads.view_all"}}},
		query{ActTokenRevoke, Target{Token: "tok-u2", Owner: "u2"}})
	return qs
}

func drawQueues(t *rapid.T) Queues {
	q := Queues{}
	for _, p := range propPaths {
		if !rapid.Bool().Draw(t, "has "+p) {
			continue
		}
		var pol QueuePolicy
		subs := rapid.SliceOfNDistinct(rapid.SampledFrom(propSubjects), 0, 3, rapid.ID[string]).Draw(t, "subjects "+p)
		for _, s := range subs {
			verbs := rapid.SliceOfNDistinct(rapid.SampledFrom(allVerbs[:]), 1, 3, rapid.ID[Verb]).Draw(t, "verbs")
			pol.Access = append(pol.Access, Entry{Subject: s, Verbs: verbs})
		}
		if rapid.Bool().Draw(t, "ceiling") {
			m := rapid.SampledFrom(propPrios).Draw(t, "max")
			pol.MaxPriority = &m
		}
		if rapid.Bool().Draw(t, "np set") {
			b := rapid.Bool().Draw(t, "np")
			pol.AllowNonPreemptible = &b
		}
		q[p] = pol
	}
	return q
}

func drawPerms(t *rapid.T, label string) []string {
	ps := rapid.SliceOfNDistinct(rapid.SampledFrom(allPermissions[1:]), 0, 3, rapid.ID[Permission]).Draw(t, label)
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = string(p)
	}
	return out
}

// drawConfig maps the universe's groups and users to random permissions,
// never admin (admin is tested on its own).
func drawConfig(t *rapid.T) *Config {
	c := &Config{GroupPermissions: map[string][]string{}, UserPermissions: map[string][]string{}}
	for _, g := range propGroups {
		c.GroupPermissions[g] = drawPerms(t, "perms "+g)
	}
	for _, u := range propUsers {
		c.UserPermissions[u] = drawPerms(t, "perms "+u)
	}
	return c
}

func drawSubject(t *rapid.T) Subject {
	s := Subject{
		User:   rapid.SampledFrom(append([]string{""}, propUsers...)).Draw(t, "user"),
		Groups: rapid.SliceOfNDistinct(rapid.SampledFrom(propGroups), 0, 3, rapid.ID[string]).Draw(t, "groups"),
	}
	if rapid.Bool().Draw(t, "is token") {
		s.TokenID = rapid.SampledFrom(propTokens).Draw(t, "token")
		for _, p := range drawPerms(t, "token perms") {
			s.TokenPermissions = append(s.TokenPermissions, Permission(p))
		}
	}
	if s.Anonymous() {
		s.User = "u1"
	}
	return s
}

// TestPropGrantIsMonotone: granting a verb on any queue (an ancestor of
// some, a descendant of others) never takes away anything anywhere.
func TestPropGrantIsMonotone(t *testing.T) {
	qs := queries()
	rapid.Check(t, func(t *rapid.T) {
		cfg, before := drawConfig(t), drawQueues(t)
		s := drawSubject(t)
		at := rapid.SampledFrom(propPaths).Draw(t, "grant at")
		who := rapid.SampledFrom(propSubjects).Draw(t, "grant to")
		verb := rapid.SampledFrom(allVerbs[:]).Draw(t, "grant verb")

		after := Queues{}
		for k, v := range before {
			v.Access = append([]Entry(nil), v.Access...)
			after[k] = v
		}
		pol := after[at]
		merged := false
		for i, e := range pol.Access {
			if e.Subject == who {
				pol.Access[i].Verbs = append(append([]Verb(nil), e.Verbs...), verb)
				merged = true
			}
		}
		if !merged {
			pol.Access = append(pol.Access, Entry{Subject: who, Verbs: []Verb{verb}})
		}
		after[at] = pol

		a0, err := New(cfg, before)
		if err != nil {
			t.Fatal(err)
		}
		a1, err := New(cfg, after)
		if err != nil {
			t.Fatal(err)
		}
		p0, p1 := a0.Bind(s), a1.Bind(s)
		for _, q := range qs {
			d0, d1 := p0.Authorize(q.act, q.t), p1.Authorize(q.act, q.t)
			if d0.Allowed && !d1.Allowed {
				t.Fatalf("granting %s to %s on %s took away %s on %s: %s", verb, who, at, q.act, q.t, d1.Reason)
			}
		}
		for _, p := range propPaths {
			if p0.CanView(p) && !p1.CanView(p) {
				t.Fatalf("granting %s to %s on %s hid %s", verb, who, at, p)
			}
		}
	})
}

// TestPropAdminAllowsEverything: admin, however it is held, is allowed
// every action on every target that exists.
func TestPropAdminAllowsEverything(t *testing.T) {
	qs := queries()
	rapid.Check(t, func(t *rapid.T) {
		cfg, q := drawConfig(t), drawQueues(t)
		var s Subject
		switch rapid.IntRange(0, 2).Draw(t, "how") {
		case 0:
			cfg.GroupPermissions["g1"] = []string{"admin"}
			s = Subject{User: "u2", Groups: []string{"g1"}}
		case 1:
			cfg.UserPermissions["u3"] = []string{"admin"}
			s = Subject{User: "u3"}
		default:
			s = Subject{User: "u1", TokenID: "t1", TokenPermissions: []Permission{PermAdmin}}
		}
		p := mustNew(t, cfg, q).Bind(s)
		for _, x := range qs {
			if d := p.Authorize(x.act, x.t); !d.Allowed {
				t.Fatalf("admin refused %s on %s: %s", x.act, x.t, d.Detail())
			}
		}
		if !p.Filter().All() {
			t.Fatal("admin's filter is not All")
		}
	})
}

// TestPropNobodyGetsNothing: a principal with no permissions and no
// access-list entries is refused every action on any resource; only the
// actions that reveal nothing (health, reflection, filtered lists, the
// fleet, its own tokens) are open to it, and its lists are empty. An
// anonymous caller gets health only.
func TestPropNobodyGetsNothing(t *testing.T) {
	qs := queries()
	rapid.Check(t, func(t *rapid.T) {
		a := mustNew(t, drawConfig(t), drawQueues(t))
		stranger := Subject{User: "stranger", Groups: []string{"outsiders"}}
		if rapid.Bool().Draw(t, "as token") {
			stranger.TokenID = "t-stranger"
		}
		p := a.Bind(stranger)
		anon := a.Bind(Subject{Groups: rapid.SliceOf(rapid.SampledFrom(propGroups)).Draw(t, "anon groups")})
		for _, x := range qs {
			d := p.Authorize(x.act, x.t)
			if d.Allowed != openToAnyAuthenticated[x.act] {
				t.Fatalf("stranger: %s on %s allowed=%v: %s", x.act, x.t, d.Allowed, d.Detail())
			}
			if x.act == ActTokenList && !d.OwnOnly {
				t.Fatal("stranger lists every token")
			}
			da := anon.Authorize(x.act, x.t)
			if da.Allowed != (x.act == ActHealthCheck) {
				t.Fatalf("anonymous: %s allowed=%v", x.act, da.Allowed)
			}
			if !da.Allowed && da.Code != CodeUnauthenticated {
				t.Fatalf("anonymous refused with %s", da.Code)
			}
		}
		f := p.Filter()
		for _, path := range propPaths {
			if f.Visible(path) || p.CanView(path) || anon.CanView(path) {
				t.Fatalf("stranger sees %s", path)
			}
		}
		if f.All() || len(f.Prefixes()) != 0 {
			t.Fatal("stranger's filter admits something")
		}
		for _, r := range Table() {
			if d := anon.AuthorizeMethod(r.Method, nil, Resolvers{}); d.Allowed != (r.Resource == ResourceOpen) {
				t.Fatalf("anonymous %s allowed=%v", r.Method, d.Allowed)
			}
		}
	})
}

// TestPropDecisionsAreDeterministic: two authorizers built from the same
// input answer every question alike.
func TestPropDecisionsAreDeterministic(t *testing.T) {
	qs := queries()
	rapid.Check(t, func(t *rapid.T) {
		cfg, q, s := drawConfig(t), drawQueues(t), drawSubject(t)
		p0, p1 := mustNew(t, cfg, q).Bind(s), mustNew(t, cfg, q).Bind(s)
		for _, x := range qs {
			d0, d1 := p0.Authorize(x.act, x.t), p1.Authorize(x.act, x.t)
			if d0.Allowed != d1.Allowed || d0.Code != d1.Code || d0.Reason != d1.Reason || d0.Basis != d1.Basis {
				t.Fatalf("%s on %s: %v vs %v", x.act, x.t, d0.Detail(), d1.Detail())
			}
		}
		if a, b := p0.Filter().Prefixes(), p1.Filter().Prefixes(); len(a) != len(b) {
			t.Fatalf("prefixes differ: %v vs %v", a, b)
		}
	})
}
