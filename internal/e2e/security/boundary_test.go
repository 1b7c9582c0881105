package security

import (
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/meridian-gpu/meridian/hub/authz"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// otherID returns a workload id of the right form that differs from id in
// its last character: almost surely one that does not exist.
func otherID(id string) string {
	last := id[len(id)-1]
	repl := byte('0')
	if last == '0' {
		repl = '1'
	}
	return id[:len(id)-1] + string(repl)
}

// TestNotFoundDoesNotLeak: another tenant's real workload, queue or token
// and a made-up one get the same code and the same message (the id aside),
// over gRPC and REST, so ids cannot be probed.
func TestNotFoundDoesNotLeak(t *testing.T) {
	w := newWorld(t)
	bobTok, _ := w.mustCreateToken(t, w.creds[roleOther], &meridianv1.APIToken{Description: "bob's"})
	fakeTok := "aaaaaaaaaaaaaaaa"
	type probe struct {
		name        string
		real, fake  string // the other tenant's object, and a missing one
		grpc        func(id string) (string, proto.Message, proto.Message)
		restMethod  string
		restPath    func(id string) string
		restBody    []byte
		callerRoles []string
	}
	wlRoles := []string{roleTAdmin, roleSub, roleViewer}
	probes := []probe{
		{name: "GetWorkload", real: w.wB, fake: otherID(w.wB), restMethod: http.MethodGet, restPath: func(id string) string { return "/v1/workloads/" + id },
			grpc: func(id string) (string, proto.Message, proto.Message) {
				return wlSvc + "GetWorkload", &meridianv1.GetWorkloadRequest{Id: id}, &meridianv1.Workload{}
			}},
		{name: "CancelWorkload", real: w.wB, fake: otherID(w.wB), restMethod: http.MethodPost, restBody: []byte("{}"),
			restPath: func(id string) string { return "/v1/workloads/" + id + ":cancel" },
			grpc: func(id string) (string, proto.Message, proto.Message) {
				return wlSvc + "CancelWorkload", &meridianv1.CancelWorkloadRequest{Id: id}, &meridianv1.Workload{}
			}},
		{name: "ExplainWorkload", real: w.wB, fake: otherID(w.wB), restMethod: http.MethodGet, restPath: func(id string) string { return "/v1/workloads/" + id + ":explain" },
			grpc: func(id string) (string, proto.Message, proto.Message) {
				return wlSvc + "ExplainWorkload", &meridianv1.ExplainWorkloadRequest{Id: id}, &meridianv1.ExplainWorkloadResponse{}
			}},
		{name: "GetQueue", real: leafB, fake: tenantB + "/no-such-queue", restMethod: http.MethodGet, restPath: func(id string) string { return "/v1/queues/" + id },
			grpc: func(id string) (string, proto.Message, proto.Message) {
				return qSvc + "GetQueue", &meridianv1.GetQueueRequest{Path: id}, &meridianv1.Queue{}
			}},
		{name: "DeleteQueue", real: leafB, fake: "no-such-tenant", restMethod: http.MethodDelete, restPath: func(id string) string { return "/v1/queues/" + id },
			grpc: func(id string) (string, proto.Message, proto.Message) {
				return qSvc + "DeleteQueue", &meridianv1.DeleteQueueRequest{Path: id}, &emptypb.Empty{}
			}},
		{name: "UpdateQueue", real: leafB, fake: tenantB + "/no-such-queue", restMethod: http.MethodPatch, restBody: []byte(`{"description":"x"}`),
			restPath: func(id string) string { return "/v1/queues/" + id + "?update_mask=description" },
			grpc: func(id string) (string, proto.Message, proto.Message) {
				return qSvc + "UpdateQueue", &meridianv1.UpdateQueueRequest{Queue: &meridianv1.Queue{Path: id, Description: "x"},
					UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"description"}}}, &meridianv1.Queue{}
			}},
		{name: "RevokeAPIToken", real: bobTok, fake: fakeTok, restMethod: http.MethodDelete, restPath: func(id string) string { return "/v1/tokens/" + id },
			grpc: func(id string) (string, proto.Message, proto.Message) {
				return authz.MethodRevokeAPIToken, &meridianv1.RevokeAPITokenRequest{Id: id}, &meridianv1.APIToken{}
			}},
	}
	cases := 0
	for _, p := range probes {
		callers := p.callerRoles
		if callers == nil {
			callers = wlRoles
		}
		for _, role := range callers {
			t.Run(p.name+"/"+role, func(t *testing.T) {
				c := w.creds[role]
				shape := func(id string) (codes.Code, string, int, string) {
					m, req, resp := p.grpc(id)
					err := w.invoke(c, m, req, resp, "")
					st := status.Convert(err)
					r := w.rest(t, nil, c, p.restMethod, p.restPath(id), p.restBody, "")
					e := decodeRESTError(r.body)
					return st.Code(), strings.ReplaceAll(st.Message(), id, "<id>"), r.status, strings.ReplaceAll(e.Message, id, "<id>")
				}
				rc, rm, rs, rb := shape(p.real)
				fc, fm, fs, fb := shape(p.fake)
				if rc != codes.NotFound || rs != http.StatusNotFound {
					t.Fatalf("%s of another tenant's %s as %s: %s %q, REST %d; want NotFound / 404", p.name, p.real, role, rc, rm, rs)
				}
				if rc != fc || rm != fm || rs != fs || rb != fb {
					t.Fatalf("%s as %s tells a hidden object from a missing one:\n  hidden:  %s %q / %d %q\n  missing: %s %q / %d %q", p.name, role, rc, rm, rs, rb, fc, fm, fs, fb)
				}
				cases++
			})
		}
	}
	t.Logf("%d probes: hidden and missing objects answer alike", cases)
}

// TestQuotaBoundary: quotas, weights and submit policies change only from
// above; an access list needs manage on the queue or an ancestor, and
// queues.create alone rewrites no access list (Armada's hole).
func TestQuotaBoundary(t *testing.T) {
	w := newWorld(t)
	alice, vera, sam := w.creds[roleTAdmin], w.creds[roleViewer], w.creds[roleSub]
	lena := w.oidcCred(t, "lena", "leaf-managers") // manage on tenant-a/leaf only
	pat := w.oidcCred(t, "pat", "platform")        // queues.create only
	updateAs := func(c cred, path string, q *meridianv1.Queue, mask ...string) error {
		q.Path = path
		return w.invoke(c, qSvc+"UpdateQueue", &meridianv1.UpdateQueueRequest{Queue: q, UpdateMask: &fieldmaskpb.FieldMask{Paths: mask}}, &meridianv1.Queue{}, w.nextRequestID("boundary"))
	}
	// lena manages the leaf.
	if err := updateAs(w.adminCred(), leafA, &meridianv1.Queue{Access: append(access("user:lena=manage"), w.leafACLA...)}, "access"); err != nil {
		t.Fatal(err)
	}
	maxPrio := int32(1000)
	refused := []struct {
		name  string
		who   cred
		path  string
		q     *meridianv1.Queue
		mask  []string
		code  codes.Code
		words string
	}{
		{"tenant admin raises its tenant's quota", alice, tenantA, &meridianv1.Queue{Quotas: quotas(100000)}, []string{"quotas"}, codes.PermissionDenied, "set from above"},
		{"tenant admin raises its tenant's weight", alice, tenantA, &meridianv1.Queue{Weight: 1000}, []string{"weight"}, codes.PermissionDenied, "set from above"},
		{"tenant admin lifts its tenant's priority ceiling", alice, tenantA, &meridianv1.Queue{SubmitPolicy: &meridianv1.SubmitPolicy{MaxPriority: &maxPrio}}, []string{"submit_policy"}, codes.PermissionDenied, "set from above"},
		{"tenant admin updates everything without a mask", alice, tenantA, &meridianv1.Queue{Quotas: quotas(100000), Access: access("group:a-admins=manage")}, nil, codes.PermissionDenied, ""},
		{"leaf manager raises its leaf's quota", lena, leafA, &meridianv1.Queue{Quotas: quotas(100000)}, []string{"quotas"}, codes.PermissionDenied, "set from above"},
		{"leaf manager raises its leaf's weight", lena, leafA, &meridianv1.Queue{Weight: 1000}, []string{"weight"}, codes.PermissionDenied, "set from above"},
		{"viewer changes an access list", vera, leafA, &meridianv1.Queue{Access: access("user:vera=manage")}, []string{"access"}, codes.PermissionDenied, "manage"},
		{"submitter changes its leaf's access list", sam, leafA, &meridianv1.Queue{Access: access("user:sam=manage")}, []string{"access"}, codes.PermissionDenied, "manage"},
		{"leaf manager changes its tenant's access list", lena, tenantA, &meridianv1.Queue{Access: access("user:lena=manage")}, []string{"access"}, codes.NotFound, "not found"},
		{"queues.create rewrites a tenant's access list", pat, tenantA, &meridianv1.Queue{Access: access("user:pat=manage")}, []string{"access"}, codes.NotFound, "not found"},
		{"queues.create updates a tenant without a mask", pat, tenantA, &meridianv1.Queue{Quotas: quotas(8000), Access: access("user:pat=manage")}, nil, codes.NotFound, "not found"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			before := w.snapshot(t)
			rid := w.nextRequestID("boundary")
			q := proto.Clone(tc.q).(*meridianv1.Queue)
			q.Path = tc.path
			err := w.invoke(tc.who, qSvc+"UpdateQueue", &meridianv1.UpdateQueueRequest{Queue: q, UpdateMask: maskOf(tc.mask)}, &meridianv1.Queue{}, rid)
			if codeOf(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.words) {
				t.Fatalf("%v; want %s mentioning %q", err, tc.code, tc.words)
			}
			if d := diffState(before, w.snapshot(t)); d != "" {
				t.Fatalf("refused update changed state: %s", d)
			}
			w.waitAudit(t, rid, string(authz.ActQueueUpdate), tc.who.user, meridianv1.AuditResult_AUDIT_RESULT_DENIED)
		})
	}
	allowed := []struct {
		name string
		who  cred
		path string
		q    *meridianv1.Queue
		mask []string
	}{
		{"tenant admin sets a team's quota below it", alice, leafA, &meridianv1.Queue{Quotas: quotas(2000)}, []string{"quotas"}},
		{"leaf manager changes its leaf's access list", lena, leafA, &meridianv1.Queue{Access: append(access("user:lena=manage", "user:sam=view"), w.leafACLA...)}, []string{"access"}},
		{"queues.create sets a tenant's quota", pat, tenantA, &meridianv1.Queue{Quotas: quotas(9000)}, []string{"quotas"}},
	}
	for _, tc := range allowed {
		t.Run(tc.name, func(t *testing.T) {
			if err := updateAs(tc.who, tc.path, proto.Clone(tc.q).(*meridianv1.Queue), tc.mask...); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("queues.create creates a tenant but cannot then grant itself into another", func(t *testing.T) {
		if err := w.invoke(pat, qSvc+"CreateQueue", &meridianv1.CreateQueueRequest{Queue: &meridianv1.Queue{Path: "tenant-c"}}, &meridianv1.Queue{}, ""); err != nil {
			t.Fatal(err)
		}
		err := w.invoke(pat, qSvc+"CreateQueue", &meridianv1.CreateQueueRequest{Queue: &meridianv1.Queue{Path: tenantA + "/pat", Access: access("user:pat=manage")}}, &meridianv1.Queue{}, "")
		if codeOf(err) != codes.NotFound {
			t.Fatalf("queues.create made a queue inside tenant-a: %v", err)
		}
	})
}

func maskOf(paths []string) *fieldmaskpb.FieldMask {
	if paths == nil {
		return nil
	}
	return &fieldmaskpb.FieldMask{Paths: paths}
}

// TestSubmitPolicy: over-ceiling and non-preemptible submits are refused
// with a clear message, for the tenant's own managers too; admin is
// exempt.
func TestSubmitPolicy(t *testing.T) {
	w := newWorld(t)
	over := leafWorkload(leafA, "too-high")
	over.Priority = 101
	nonPreempt := leafWorkload(leafA, "not-preemptible")
	nonPreempt.Preemptible = false
	for _, role := range []string{roleSub, roleTAdmin} {
		for _, tc := range []struct {
			w     *meridianv1.Workload
			words string
		}{
			{over, "priority 101 is above the ceiling 100 of queue tenant-a/leaf"},
			{nonPreempt, "accepts only preemptible work"},
		} {
			t.Run(role+"/"+tc.w.GetName(), func(t *testing.T) {
				before := w.snapshot(t)
				rid := w.nextRequestID("policy")
				err := w.invoke(w.creds[role], wlSvc+"SubmitWorkload", &meridianv1.SubmitWorkloadRequest{Workload: tc.w}, &meridianv1.SubmitWorkloadResponse{}, rid)
				if codeOf(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), tc.words) {
					t.Fatalf("%v; want PermissionDenied saying %q", err, tc.words)
				}
				r := w.rest(t, nil, w.creds[role], http.MethodPost, "/v1/workloads", tc.w, "")
				if r.status != http.StatusForbidden || !strings.Contains(decodeRESTError(r.body).Message, tc.words) {
					t.Fatalf("REST: %d %s; want 403 saying %q", r.status, r.body, tc.words)
				}
				if d := diffState(before, w.snapshot(t)); d != "" {
					t.Fatalf("refused submit changed state: %s", d)
				}
				w.waitAudit(t, rid, string(authz.ActWorkloadSubmit), w.creds[role].user, meridianv1.AuditResult_AUDIT_RESULT_DENIED)
			})
		}
	}
	t.Run("at the ceiling", func(t *testing.T) {
		ok := leafWorkload(leafA, "at-ceiling")
		ok.Priority = 100
		w.mustSubmit(t, w.creds[roleSub], ok)
	})
	t.Run("admin is exempt", func(t *testing.T) {
		w.mustSubmit(t, w.adminCred(), over)
		w.mustSubmit(t, w.adminCred(), nonPreempt)
	})
}
