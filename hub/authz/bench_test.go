package authz

import (
	"fmt"
	"testing"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// benchTree is 10 tenants × 10 teams × 9 projects (1,010 queues), each
// with two or three access-list entries and ceilings on the teams.
func benchTree() Queues {
	q := Queues{}
	tb := makeTree()
	for t := 0; t < 10; t++ {
		tn := fmt.Sprintf("t%d", t)
		tb.Queue(tn, "group:"+tn+"-admins=manage", "user:owner-"+tn+"=manage").MaxPriority(tn, 10_000)
		for m := 0; m < 10; m++ {
			mn := fmt.Sprintf("%s/m%d", tn, m)
			g := fmt.Sprintf("t%d-m%d", t, m)
			tb.Queue(mn, "group:"+g+"=submit", "user:lead-"+g+"=update", "group:"+g+"-readers=view").MaxPriority(mn, 1000)
			for p := 0; p < 9; p++ {
				pn := fmt.Sprintf("%s/p%d", mn, p)
				tb.Queue(pn, fmt.Sprintf("group:%s-p%d=submit,cancel", g, p), fmt.Sprintf("token:tok-%s-p%d=submit", g, p))
			}
		}
	}
	for k, v := range tb.Obj() {
		q[k] = v
	}
	return q
}

// benchSubject has 50 groups, as an OIDC token from a large directory
// carries: two match access lists, one a permission mapping, the rest
// nothing.
func benchSubject() Subject {
	s := Subject{User: "alice"}
	for i := 0; i < 47; i++ {
		s.Groups = append(s.Groups, fmt.Sprintf("corp-dept-%02d", i))
	}
	s.Groups = append(s.Groups, "t3-m4", "t3-m4-p2", "readers")
	return s
}

func benchAuthorizer(b *testing.B) *Authorizer {
	cfg := &Config{GroupPermissions: map[string][]string{"readers": {"audit.read"}, "platform": {"admin"}}}
	for i := 0; i < 20; i++ {
		cfg.GroupPermissions[fmt.Sprintf("ops-%d", i)] = []string{"clusters.manage"}
	}
	return mustNew(b, cfg, benchTree())
}

var sinkDecision Decision
var sinkBool bool

// BenchmarkAuthorizeSubmit is the decision on the submit path, the
// principal bound once per request beforehand.
func BenchmarkAuthorizeSubmit(b *testing.B) {
	a := benchAuthorizer(b)
	p := a.Bind(benchSubject())
	req := &meridianv1.SubmitWorkloadRequest{Workload: &meridianv1.Workload{Queue: "t3/m4/p2", Priority: 10, Preemptible: true}}
	method := meridianv1.WorkloadService_SubmitWorkload_FullMethodName
	if d := p.AuthorizeMethod(method, req, Resolvers{}); !d.Allowed {
		b.Fatal(d.Detail())
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sinkDecision = p.AuthorizeMethod(method, req, Resolvers{})
	}
}

// BenchmarkAuthorizeSubmitWithBind is the whole per-request cost: Bind
// (50 groups) and the submit decision.
func BenchmarkAuthorizeSubmitWithBind(b *testing.B) {
	a := benchAuthorizer(b)
	s := benchSubject()
	req := &meridianv1.SubmitWorkloadRequest{Workload: &meridianv1.Workload{Queue: "t3/m4/p2", Priority: 10, Preemptible: true}}
	method := meridianv1.WorkloadService_SubmitWorkload_FullMethodName
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sinkDecision = a.Bind(s).AuthorizeMethod(method, req, Resolvers{})
	}
}

// BenchmarkBind is binding a 50-group subject.
func BenchmarkBind(b *testing.B) {
	a := benchAuthorizer(b)
	s := benchSubject()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sinkBool = a.Bind(s).anon
	}
}

// BenchmarkCanView is the per-item check of a list or watch, over paths
// that are visible and paths that are not.
func BenchmarkCanView(b *testing.B) {
	a := benchAuthorizer(b)
	p := a.Bind(benchSubject())
	var paths []string
	for q := range benchTree() {
		paths = append(paths, q)
	}
	f := p.Filter()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sinkBool = f.Visible(paths[i%len(paths)])
	}
}

// BenchmarkCancelWorkload is a workload-targeted decision with a resolver.
func BenchmarkCancelWorkload(b *testing.B) {
	a := benchAuthorizer(b)
	p := a.Bind(benchSubject())
	r := fakeResolver{queues: map[string]string{"w1": "t3/m4/p2"}}
	req := &meridianv1.CancelWorkloadRequest{Id: "w1"}
	method := meridianv1.WorkloadService_CancelWorkload_FullMethodName
	if d := p.AuthorizeMethod(method, req, r.resolvers()); !d.Allowed {
		b.Fatal(d.Detail())
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sinkDecision = p.AuthorizeMethod(method, req, r.resolvers())
	}
}

// BenchmarkFilterPrefixes computes the visible subtrees once per list.
func BenchmarkFilterPrefixes(b *testing.B) {
	a := benchAuthorizer(b)
	p := a.Bind(benchSubject())
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sinkBool = len(p.Filter().Prefixes()) > 0
	}
}

// BenchmarkNew compiles the 1,010-queue snapshot (done when a queue's
// access list or ceiling changes).
func BenchmarkNew(b *testing.B) {
	q := benchTree()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := New(nil, q); err != nil {
			b.Fatal(err)
		}
	}
}
