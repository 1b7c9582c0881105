package security

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/meridian-gpu/meridian/hub/authz"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// outcome is what one matrix case expects.
type outcome struct {
	code codes.Code
	// allow: the authorization layer lets the call through (the handler
	// may still answer an error, such as a cluster that does not exist).
	allow bool
}

// parseOutcome reads one cell of an expectation row:
//
//	OK  allowed, answers OK
//	nf  allowed, the handler answers NotFound (the object does not exist)
//	NF  refused as NotFound (hidden: reads like a missing object)
//	PD  refused, PermissionDenied
//	UA  refused, Unauthenticated
func parseOutcome(s string) outcome {
	switch s {
	case "OK":
		return outcome{codes.OK, true}
	case "nf":
		return outcome{codes.NotFound, true}
	case "NF":
		return outcome{codes.NotFound, false}
	case "PD":
		return outcome{codes.PermissionDenied, false}
	case "UA":
		return outcome{codes.Unauthenticated, false}
	}
	panic("unknown outcome " + s)
}

// prepared is one case's request, over gRPC and over REST.
type prepared struct {
	req, resp  proto.Message
	restMethod string
	restPath   string
	restBody   any
}

// matrixOp is one RPC (or one variant of it) of the matrix.
type matrixOp struct {
	name    string
	method  string
	targets []string // "A" (tenant-a) and "B" (tenant-b), or "-" when the RPC names no tenant
	// expect maps a role to its outcome per target, space-separated in
	// the order of targets.
	expect  map[string]string
	prepare func(t *testing.T, w *world, target string, n int) prepared
	// check, when set, inspects an allowed OK answer (lists: every item
	// visible to the role).
	check func(t *testing.T, w *world, role, target string, resp proto.Message)
}

const (
	wlSvc  = "/meridian.v1.WorkloadService/"
	qSvc   = "/meridian.v1.QueueService/"
	clSvc  = "/meridian.v1.ClusterService/"
	admSvc = "/meridian.v1.AdminService/"
)

var bothTargets = []string{"A", "B"}
var noTarget = []string{"-"}

// row builds an expectation map in the order of roles.
func row(admin, tadmin, sub, viewer, other, anon string) map[string]string {
	return map[string]string{roleAdmin: admin, roleTAdmin: tadmin, roleSub: sub, roleViewer: viewer, roleOther: other, roleAnon: anon}
}

// allAuthenticated: every authenticated role gets cell, anonymous UA.
func allAuthenticated(cell string, targets []string) map[string]string {
	c := strings.TrimSpace(strings.Repeat(cell+" ", len(targets)))
	u := strings.TrimSpace(strings.Repeat("UA ", len(targets)))
	return row(c, c, c, c, c, u)
}

const missingCluster = "gpu-east"

// matrixOps is the matrix. Read a row as: role → outcome on tenant-a's
// object, outcome on tenant-b's object.
func matrixOps() []matrixOp {
	fixedWorkload := func(w *world, target string) string {
		if target == "B" {
			return w.wB
		}
		return w.wA
	}
	tokenGroup := map[string]string{"A": "a-admins", "B": "b-admins"}
	return []matrixOp{
		{name: "SubmitWorkload", method: wlSvc + "SubmitWorkload", targets: bothTargets,
			expect: row("OK OK", "OK NF", "OK NF", "PD NF", "NF OK", "UA UA"),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				wl := leafWorkload(leafOf(target), fmt.Sprintf("m-%d", n))
				return prepared{&meridianv1.SubmitWorkloadRequest{Workload: wl}, &meridianv1.SubmitWorkloadResponse{}, http.MethodPost, "/v1/workloads", wl}
			}},
		{name: "SubmitWorkloads", method: wlSvc + "SubmitWorkloads", targets: bothTargets,
			expect: row("OK OK", "OK NF", "OK NF", "PD NF", "NF OK", "UA UA"),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				req := &meridianv1.SubmitWorkloadsRequest{Workloads: []*meridianv1.Workload{
					leafWorkload(leafOf(target), fmt.Sprintf("mb-%d-0", n)), leafWorkload(leafOf(target), fmt.Sprintf("mb-%d-1", n))}}
				return prepared{req, &meridianv1.SubmitWorkloadsResponse{}, http.MethodPost, "/v1/workloads:batchSubmit", req}
			}},
		{name: "GetWorkload", method: wlSvc + "GetWorkload", targets: bothTargets,
			expect: row("OK OK", "OK NF", "OK NF", "OK NF", "NF OK", "UA UA"),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				id := fixedWorkload(w, target)
				return prepared{&meridianv1.GetWorkloadRequest{Id: id}, &meridianv1.Workload{}, http.MethodGet, "/v1/workloads/" + id, nil}
			}},
		{name: "ListWorkloads", method: wlSvc + "ListWorkloads", targets: bothTargets,
			expect: allAuthenticated("OK", bothTargets),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				q := tenantOf(target)
				return prepared{&meridianv1.ListWorkloadsRequest{Queue: q, PageSize: 1000}, &meridianv1.ListWorkloadsResponse{}, http.MethodGet, "/v1/workloads?page_size=1000&queue=" + q, nil}
			},
			check: func(t *testing.T, w *world, role, target string, resp proto.Message) {
				items := resp.(*meridianv1.ListWorkloadsResponse).GetWorkloads()
				found := false
				for _, it := range items {
					if !canSee(role, it.GetQueue()) {
						t.Errorf("%s listed workload %s of queue %s it may not see", role, it.GetId(), it.GetQueue())
					}
					found = found || it.GetId() == fixedWorkload(w, target)
				}
				if want := canSee(role, leafOf(target)); found != want {
					t.Errorf("%s: workload %s listed = %v, want %v", role, fixedWorkload(w, target), found, want)
				}
			}},
		{name: "SearchWorkloads", method: wlSvc + "SearchWorkloads", targets: bothTargets,
			expect: allAuthenticated("OK", bothTargets),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				q := tenantOf(target)
				return prepared{&meridianv1.SearchWorkloadsRequest{Queue: q, PageSize: 1000, IncludeCounts: true}, &meridianv1.SearchWorkloadsResponse{},
					http.MethodGet, "/v1/workloads:search?page_size=1000&include_counts=true&queue=" + q, nil}
			},
			check: func(t *testing.T, w *world, role, target string, resp proto.Message) {
				r := resp.(*meridianv1.SearchWorkloadsResponse)
				found := false
				for _, it := range r.GetWorkloads() {
					if !canSee(role, it.GetQueue()) {
						t.Errorf("%s found workload %s of queue %s it may not see", role, it.GetId(), it.GetQueue())
					}
					found = found || it.GetId() == fixedWorkload(w, target)
				}
				if want := canSee(role, leafOf(target)); found != want {
					t.Errorf("%s: workload %s found = %v, want %v", role, fixedWorkload(w, target), found, want)
				}
				// The counts must not reveal hidden queues either.
				for _, c := range r.GetQueueCounts() {
					if !canSee(role, c.GetKey()) {
						t.Errorf("%s: search counted queue %s it may not see", role, c.GetKey())
					}
				}
			}},
		{name: "CancelWorkload", method: wlSvc + "CancelWorkload", targets: bothTargets,
			expect: row("OK OK", "OK NF", "PD NF", "PD NF", "NF OK", "UA UA"),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				id := w.mustSubmit(t, w.adminCred(), leafWorkload(leafOf(target), fmt.Sprintf("c-%d", n)))
				return prepared{&meridianv1.CancelWorkloadRequest{Id: id}, &meridianv1.Workload{}, http.MethodPost, "/v1/workloads/" + id + ":cancel", []byte("{}")}
			}},
		{name: "ExplainWorkload", method: wlSvc + "ExplainWorkload", targets: bothTargets,
			expect: row("OK OK", "OK NF", "OK NF", "OK NF", "NF OK", "UA UA"),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				id := fixedWorkload(w, target)
				return prepared{&meridianv1.ExplainWorkloadRequest{Id: id}, &meridianv1.ExplainWorkloadResponse{}, http.MethodGet, "/v1/workloads/" + id + ":explain", nil}
			}},
		{name: "WatchWorkloads", method: wlSvc + "WatchWorkloads", targets: bothTargets,
			expect: allAuthenticated("OK", bothTargets)}, // run by runWatchCase

		{name: "CreateQueue(child)", method: qSvc + "CreateQueue", targets: bothTargets,
			expect: row("OK OK", "OK NF", "NF NF", "PD NF", "NF OK", "UA UA"),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				q := &meridianv1.Queue{Path: fmt.Sprintf("%s/new-%d", tenantOf(target), n)}
				return prepared{&meridianv1.CreateQueueRequest{Queue: q}, &meridianv1.Queue{}, http.MethodPost, "/v1/queues", q}
			}},
		{name: "UpdateQueue(description of leaf)", method: qSvc + "UpdateQueue", targets: bothTargets,
			expect: row("OK OK", "OK NF", "PD NF", "PD NF", "NF OK", "UA UA"),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				q := &meridianv1.Queue{Path: leafOf(target), Description: fmt.Sprintf("d-%d", n)}
				return prepared{&meridianv1.UpdateQueueRequest{Queue: q, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"description"}}}, &meridianv1.Queue{},
					http.MethodPatch, "/v1/queues/" + q.Path + "?update_mask=description", &meridianv1.Queue{Description: q.Description}}
			}},
		{name: "UpdateQueue(quotas of tenant)", method: qSvc + "UpdateQueue", targets: bothTargets,
			// The quota boundary: a tenant's own managers cannot raise it.
			expect: row("OK OK", "PD NF", "NF NF", "PD NF", "NF PD", "UA UA"),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				q := &meridianv1.Queue{Path: tenantOf(target), Quotas: quotas(int64(9000 + n))}
				return prepared{&meridianv1.UpdateQueueRequest{Queue: q, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"quotas"}}}, &meridianv1.Queue{},
					http.MethodPatch, "/v1/queues/" + q.Path + "?update_mask=quotas", &meridianv1.Queue{Quotas: q.Quotas}}
			}},
		{name: "UpdateQueue(access list of leaf)", method: qSvc + "UpdateQueue", targets: bothTargets,
			expect: row("OK OK", "OK NF", "PD NF", "PD NF", "NF OK", "UA UA"),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				acl := w.leafACLA
				if target == "B" {
					acl = w.leafACLB
				}
				// The same list: an allowed update leaves the tenants as they are.
				q := &meridianv1.Queue{Path: leafOf(target), Access: acl}
				return prepared{&meridianv1.UpdateQueueRequest{Queue: q, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"access"}}}, &meridianv1.Queue{},
					http.MethodPatch, "/v1/queues/" + q.Path + "?update_mask=access", &meridianv1.Queue{Access: acl}}
			}},
		{name: "GetQueue(leaf)", method: qSvc + "GetQueue", targets: bothTargets,
			expect: row("OK OK", "OK NF", "OK NF", "OK NF", "NF OK", "UA UA"),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				return prepared{&meridianv1.GetQueueRequest{Path: leafOf(target)}, &meridianv1.Queue{}, http.MethodGet, "/v1/queues/" + leafOf(target), nil}
			}},
		{name: "ListQueues", method: qSvc + "ListQueues", targets: bothTargets,
			expect: allAuthenticated("OK", bothTargets),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				p := tenantOf(target)
				return prepared{&meridianv1.ListQueuesRequest{Prefix: p, PageSize: 1000}, &meridianv1.ListQueuesResponse{}, http.MethodGet, "/v1/queues?page_size=1000&prefix=" + p, nil}
			},
			check: func(t *testing.T, w *world, role, target string, resp proto.Message) {
				found := false
				for _, q := range resp.(*meridianv1.ListQueuesResponse).GetQueues() {
					if !canSee(role, q.GetPath()) {
						t.Errorf("%s listed queue %s it may not see", role, q.GetPath())
					}
					found = found || q.GetPath() == leafOf(target)
				}
				if want := canSee(role, leafOf(target)); found != want {
					t.Errorf("%s: queue %s listed = %v, want %v", role, leafOf(target), found, want)
				}
			}},
		{name: "DeleteQueue(child)", method: qSvc + "DeleteQueue", targets: bothTargets,
			expect: row("OK OK", "OK NF", "NF NF", "PD NF", "NF OK", "UA UA"),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				path := fmt.Sprintf("%s/del-%d", tenantOf(target), n)
				w.mustCreateQueue(t, &meridianv1.Queue{Path: path})
				return prepared{&meridianv1.DeleteQueueRequest{Path: path}, &emptypb.Empty{}, http.MethodDelete, "/v1/queues/" + path, nil}
			}},

		{name: "ListClusters", method: clSvc + "ListClusters", targets: noTarget, expect: allAuthenticated("OK", noTarget),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				return prepared{&meridianv1.ListClustersRequest{}, &meridianv1.ListClustersResponse{}, http.MethodGet, "/v1/clusters", nil}
			}},
		{name: "ListAcceleratorClasses", method: clSvc + "ListAcceleratorClasses", targets: noTarget, expect: allAuthenticated("OK", noTarget),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				return prepared{&meridianv1.ListAcceleratorClassesRequest{}, &meridianv1.ListAcceleratorClassesResponse{}, http.MethodGet, "/v1/acceleratorClasses", nil}
			}},
		{name: "GetCluster", method: clSvc + "GetCluster", targets: noTarget, expect: allAuthenticated("nf", noTarget),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				return prepared{&meridianv1.GetClusterRequest{Id: missingCluster}, &meridianv1.Cluster{}, http.MethodGet, "/v1/clusters/" + missingCluster, nil}
			}},
		{name: "GetClusterTopology", method: clSvc + "GetClusterTopology", targets: noTarget, expect: allAuthenticated("nf", noTarget),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				return prepared{&meridianv1.GetClusterTopologyRequest{Id: missingCluster}, &meridianv1.ClusterTopology{}, http.MethodGet, "/v1/clusters/" + missingCluster + ":topology", nil}
			}},
		{name: "DrainCluster", method: clSvc + "DrainCluster", targets: noTarget, expect: row("nf", "PD", "PD", "PD", "PD", "UA"),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				return prepared{&meridianv1.DrainClusterRequest{Id: missingCluster}, &meridianv1.Cluster{}, http.MethodPost, "/v1/clusters/" + missingCluster + ":drain", []byte("{}")}
			}},
		{name: "ResumeCluster", method: clSvc + "ResumeCluster", targets: noTarget, expect: row("nf", "PD", "PD", "PD", "PD", "UA"),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				return prepared{&meridianv1.ResumeClusterRequest{Id: missingCluster}, &meridianv1.Cluster{}, http.MethodPost, "/v1/clusters/" + missingCluster + ":resume", []byte("{}")}
			}},
		// A cluster's NATS credentials: clusters.manage only (the admin
		// here). Each allowed register names a new cluster, so it is OK;
		// the others name one never registered.
		{name: "RegisterCluster", method: clSvc + "RegisterCluster", targets: noTarget, expect: row("OK", "PD", "PD", "PD", "PD", "UA"),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				id := fmt.Sprintf("reg-%d", n)
				return prepared{&meridianv1.RegisterClusterRequest{Id: id}, &meridianv1.RegisterClusterResponse{}, http.MethodPost, "/v1/clusters:register", map[string]any{"id": id}}
			},
			check: func(t *testing.T, w *world, role, target string, resp proto.Message) {
				r := resp.(*meridianv1.RegisterClusterResponse)
				if !strings.Contains(r.GetNatsCreds(), "NKEY SEED") || !strings.HasPrefix(r.GetCredential().GetPublicKey(), "U") {
					t.Fatalf("RegisterCluster answered no credential: %v", r.GetCredential())
				}
				// The seed is secret: never in the hub's logs or audit log.
				seed := r.GetNatsCreds()[strings.Index(r.GetNatsCreds(), "SU"):]
				seed = seed[:strings.IndexAny(seed, "\r\n")]
				audit, _ := os.ReadFile(w.auditFile)
				if strings.Contains(w.logs.String(), seed) || strings.Contains(string(audit), seed) {
					t.Fatal("the issued nkey seed appears in the hub's logs or audit log")
				}
			}},
		{name: "ListClusterCredentials", method: clSvc + "ListClusterCredentials", targets: noTarget, expect: row("nf", "PD", "PD", "PD", "PD", "UA"),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				return prepared{&meridianv1.ListClusterCredentialsRequest{Id: missingCluster}, &meridianv1.ListClusterCredentialsResponse{}, http.MethodGet, "/v1/clusters/" + missingCluster + "/credentials", nil}
			}},
		{name: "RevokeClusterCredentials", method: clSvc + "RevokeClusterCredentials", targets: noTarget, expect: row("nf", "PD", "PD", "PD", "PD", "UA"),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				return prepared{&meridianv1.RevokeClusterCredentialsRequest{Id: missingCluster, All: true}, &meridianv1.RevokeClusterCredentialsResponse{}, http.MethodPost,
					"/v1/clusters/" + missingCluster + "/credentials:revoke", map[string]any{"all": true}}
			}},

		{name: "GetLeader", method: admSvc + "GetLeader", targets: noTarget, expect: allAuthenticated("OK", noTarget),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				return prepared{&meridianv1.GetLeaderRequest{}, &meridianv1.Leader{}, http.MethodGet, "/v1/admin/leader", nil}
			}},
		{name: "GetHealth", method: admSvc + "GetHealth", targets: noTarget, expect: allAuthenticated("OK", noTarget),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				return prepared{&meridianv1.GetHealthRequest{}, &meridianv1.Health{}, http.MethodGet, "/v1/admin/health", nil}
			}},
		{name: "WhoAmI", method: admSvc + "WhoAmI", targets: noTarget, expect: allAuthenticated("OK", noTarget),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				return prepared{&meridianv1.WhoAmIRequest{}, &meridianv1.WhoAmIResponse{}, http.MethodGet, "/v1/whoami", nil}
			},
			check: func(t *testing.T, w *world, role, target string, resp proto.Message) {
				if got, want := resp.(*meridianv1.WhoAmIResponse).GetPrincipal().GetUser(), w.creds[role].user; got != want {
					t.Errorf("WhoAmI as %s says %q, want %q", role, got, want)
				}
			}},
		{name: "CreateAPIToken(in the tenant's admin group)", method: authz.MethodCreateAPIToken, targets: bothTargets,
			expect: row("OK OK", "OK PD", "PD PD", "PD PD", "PD OK", "UA UA"),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				req := &meridianv1.CreateAPITokenRequest{Token: &meridianv1.APIToken{Description: fmt.Sprintf("m-%d", n), Groups: []string{tokenGroup[target]}}}
				return prepared{req, &meridianv1.CreateAPITokenResponse{}, http.MethodPost, "/v1/tokens", req}
			}},
		{name: "ListAPITokens", method: authz.MethodListAPITokens, targets: noTarget, expect: allAuthenticated("OK", noTarget),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				return prepared{&meridianv1.ListAPITokensRequest{PageSize: 1000}, &meridianv1.ListAPITokensResponse{}, http.MethodGet, "/v1/tokens?page_size=1000", nil}
			},
			check: func(t *testing.T, w *world, role, target string, resp proto.Message) {
				for _, tok := range resp.(*meridianv1.ListAPITokensResponse).GetTokens() {
					if role != roleAdmin && tok.GetCreatedBy() != w.creds[role].user {
						t.Errorf("%s listed token %s created by %s", role, tok.GetId(), tok.GetCreatedBy())
					}
				}
			}},
		{name: "RevokeAPIToken(created by the tenant's admin)", method: authz.MethodRevokeAPIToken, targets: bothTargets,
			expect: row("OK OK", "OK NF", "NF NF", "NF NF", "NF OK", "UA UA"),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				owner := w.creds[roleTAdmin]
				if target == "B" {
					owner = w.creds[roleOther]
				}
				id, _ := w.mustCreateToken(t, owner, &meridianv1.APIToken{Description: fmt.Sprintf("r-%d", n)})
				return prepared{&meridianv1.RevokeAPITokenRequest{Id: id}, &meridianv1.APIToken{}, http.MethodDelete, "/v1/tokens/" + id, nil}
			}},
		{name: "ListAuditEvents", method: authz.MethodListAuditEvents, targets: noTarget, expect: row("OK", "PD", "PD", "PD", "PD", "UA"),
			prepare: func(t *testing.T, w *world, target string, n int) prepared {
				return prepared{&meridianv1.ListAuditEventsRequest{PageSize: 5}, &meridianv1.ListAuditEventsResponse{}, http.MethodGet, "/v1/audit/events?page_size=5", nil}
			}},
	}
}

// TestCrossTenantMatrix runs every RPC of every meridian.v1 service as
// each role against each tenant's objects, over gRPC and REST, and checks
// the answer, the unchanged state after every refusal, and its audit
// event.
func TestCrossTenantMatrix(t *testing.T) {
	ops := matrixOps()
	checkMatrixCoversEveryRPC(t, ops)
	w := newWorld(t)
	w.waitLeader(t)

	n := 0
	for _, op := range ops {
		for _, role := range roles {
			cells := strings.Fields(op.expect[role])
			if len(cells) != len(op.targets) {
				t.Fatalf("%s: role %s has %d outcomes for %d targets", op.name, role, len(cells), len(op.targets))
			}
			for ti, target := range op.targets {
				exp := parseOutcome(cells[ti])
				for _, transport := range []string{"grpc", "rest"} {
					n++
					name := fmt.Sprintf("%s/%s/%s/%s", op.name, role, target, transport)
					t.Run(name, func(t *testing.T) {
						if op.method == wlSvc+"WatchWorkloads" {
							w.runWatchCase(t, role, target, transport, exp)
							return
						}
						w.runCase(t, op, role, target, transport, exp, n)
					})
				}
			}
		}
	}
	t.Logf("cross-tenant matrix: %d cases (%d RPC variants × %d roles × targets × gRPC and REST)", n, len(ops), len(roles))
	t.Logf("expectations (own tenant-a object, other tenant-b object; '-' = no tenant):\n%s", matrixTable(ops))
}

// runCase runs one unary case.
func (w *world) runCase(t *testing.T, op matrixOp, role, target, transport string, exp outcome, n int) {
	prep := op.prepare(t, w, target, n)
	c := w.creds[role]
	rid := w.nextRequestID("matrix")
	var before map[string]string
	if !exp.allow {
		before = w.snapshot(t)
	}
	var resp proto.Message
	if transport == "grpc" {
		resp = prep.resp
		err := w.invoke(c, op.method, prep.req, resp, rid)
		if got := codeOf(err); got != exp.code {
			t.Fatalf("gRPC %s as %s on %s: %v; want %s", op.name, role, target, err, exp.code)
		}
	} else {
		r := w.rest(t, nil, c, prep.restMethod, prep.restPath, prep.restBody, rid)
		if want := httpStatus(exp.code); r.status != want {
			t.Fatalf("REST %s %s as %s: %d %s; want %d", prep.restMethod, prep.restPath, role, r.status, r.body, want)
		}
		if r.status == http.StatusOK {
			resp = prep.resp.ProtoReflect().New().Interface()
			if err := protojson.Unmarshal(r.body, resp); err != nil {
				t.Fatalf("REST answer does not decode as %T: %v", resp, err)
			}
		}
	}
	if exp.allow {
		if exp.code == codes.OK && op.check != nil {
			op.check(t, w, role, target, resp)
		}
		return
	}
	if d := diffState(before, w.snapshot(t)); d != "" {
		t.Fatalf("a refused %s as %s changed state: %s", op.name, role, d)
	}
	w.expectDeniedAudit(t, op.method, role, rid, exp.code)
}

// expectDeniedAudit checks the audit event of a refused request.
func (w *world) expectDeniedAudit(t *testing.T, method, role, rid string, code codes.Code) {
	t.Helper()
	rule, ok := authz.RuleFor(method)
	if !ok {
		t.Fatalf("no authorization rule for %s", method)
	}
	result, user := meridianv1.AuditResult_AUDIT_RESULT_DENIED, w.creds[role].user
	if role == roleAnon {
		result, user = meridianv1.AuditResult_AUDIT_RESULT_UNAUTHENTICATED, ""
	}
	ev := w.waitAudit(t, rid, string(rule.Action), user, result)
	if ev.GetRpc() != method || ev.GetCode() != code.String() {
		t.Errorf("audit event %s: rpc %s code %s; want %s %s", ev.GetId(), ev.GetRpc(), ev.GetCode(), method, code)
	}
	if ev.GetReason() == "" {
		t.Errorf("audit event %s has no reason", ev.GetId())
	}
}

// watchEvents reads a watch stream, over gRPC or REST.
type watchEvents interface {
	next() (*meridianv1.WorkloadEvent, error)
}

type grpcWatch struct {
	s meridianv1.WorkloadService_WatchWorkloadsClient
}

func (g grpcWatch) next() (*meridianv1.WorkloadEvent, error) { return g.s.Recv() }

type restWatch struct{ r *bufio.Reader }

func (r restWatch) next() (*meridianv1.WorkloadEvent, error) {
	line, err := r.r.ReadBytes('\n')
	if err != nil {
		return nil, err
	}
	var env struct {
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(line, &env); err != nil {
		return nil, fmt.Errorf("watch line %q: %w", line, err)
	}
	if len(env.Error) > 0 {
		return nil, fmt.Errorf("watch error: %s", env.Error)
	}
	ev := &meridianv1.WorkloadEvent{}
	if err := protojson.Unmarshal(env.Result, ev); err != nil {
		return nil, err
	}
	return ev, nil
}

// runWatchCase opens a watch of every queue as role, then the admin
// submits a probe workload into the target tenant and a barrier workload
// into a queue role sees. Once the barrier arrives, the probe must have
// arrived exactly when role may see the target, and no event of a queue
// role may not see may ever have arrived.
func (w *world) runWatchCase(t *testing.T, role, target, transport string, exp outcome) {
	c := w.creds[role]
	rid := w.nextRequestID("matrix-watch")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var before map[string]string
	if !exp.allow {
		before = w.snapshot(t)
	}
	var src watchEvents
	if transport == "grpc" {
		s, err := w.wl.WatchWorkloads(withCred(ctx, c, rid), &meridianv1.WatchWorkloadsRequest{SendInitial: true})
		if err != nil {
			t.Fatalf("WatchWorkloads: %v", err)
		}
		src = grpcWatch{s}
		if !exp.allow {
			_, err := src.next()
			if codeOf(err) != exp.code {
				t.Fatalf("gRPC watch as %s: %v; want %s", role, err, exp.code)
			}
		}
	} else {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, w.restBase+"/v1/workloads:watch?send_initial=true", nil)
		if c.header != "" {
			req.Header.Set("Authorization", c.header)
		}
		req.Header.Set("X-Request-Id", rid)
		resp, err := w.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if want := httpStatus(exp.code); resp.StatusCode != want {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
			t.Fatalf("REST watch as %s: %d %s; want %d", role, resp.StatusCode, b, want)
		}
		src = restWatch{bufio.NewReaderSize(resp.Body, 1<<20)}
	}
	if !exp.allow {
		if d := diffState(before, w.snapshot(t)); d != "" {
			t.Fatalf("a refused watch changed state: %s", d)
		}
		w.expectDeniedAudit(t, wlSvc+"WatchWorkloads", role, rid, exp.code)
		return
	}
	seen := func(ev *meridianv1.WorkloadEvent) {
		if q := ev.GetWorkload().GetQueue(); ev.GetWorkload() != nil && !canSee(role, q) {
			t.Errorf("watch as %s delivered %s of workload %s in queue %s it may not see", role, ev.GetType(), ev.GetWorkload().GetId(), q)
		}
	}
	for i := 0; ; i++ { // the initial state, up to the first bookmark
		ev, err := src.next()
		if err != nil {
			t.Fatalf("watch as %s, initial events: %v", role, err)
		}
		seen(ev)
		if ev.GetType() == meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_BOOKMARK {
			break
		}
		if i > 100000 {
			t.Fatal("no bookmark after the initial events")
		}
	}
	probe := w.mustSubmit(t, w.adminCred(), leafWorkload(leafOf(target), "watch-probe"))
	barrier := w.mustSubmit(t, w.adminCred(), leafWorkload(ownLeaf(role), "watch-barrier"))
	probeSeen := false
	for {
		ev, err := src.next()
		if err != nil {
			t.Fatalf("watch as %s: no event of the barrier workload %s: %v", role, barrier, err)
		}
		seen(ev)
		id := ev.GetWorkload().GetId()
		probeSeen = probeSeen || id == probe
		if id == barrier {
			break
		}
	}
	if want := canSee(role, leafOf(target)); probeSeen != want && !(probe == barrier) {
		t.Errorf("watch as %s: probe workload in %s delivered = %v, want %v", role, leafOf(target), probeSeen, want)
	}
}

// waitLeader waits until the hub elected itself (GetLeader answers OK),
// at most 30 s.
func (w *world) waitLeader(t *testing.T) {
	t.Helper()
	var err error
	for i := 0; i < 300; i++ {
		if err = w.invoke(w.adminCred(), admSvc+"GetLeader", &meridianv1.GetLeaderRequest{}, &meridianv1.Leader{}, ""); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no leader after 30s: %v", err)
}

// checkMatrixCoversEveryRPC fails for an RPC of a meridian.v1 service the
// matrix does not exercise, and for a matrix entry naming no RPC.
func checkMatrixCoversEveryRPC(t *testing.T, ops []matrixOp) {
	t.Helper()
	covered := map[string]bool{}
	for _, op := range ops {
		covered[op.method] = true
		if _, ok := authz.RuleFor(op.method); !ok {
			t.Errorf("matrix entry %s names %s, which has no authorization rule", op.name, op.method)
		}
	}
	var all []string
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if fd.Package() != "meridian.v1" {
			return true
		}
		for i := 0; i < fd.Services().Len(); i++ {
			sd := fd.Services().Get(i)
			for j := 0; j < sd.Methods().Len(); j++ {
				all = append(all, "/"+string(sd.FullName())+"/"+string(sd.Methods().Get(j).Name()))
			}
		}
		return true
	})
	sort.Strings(all)
	if len(all) < 20 {
		t.Fatalf("found only %d meridian.v1 RPCs in the descriptor registry: %v", len(all), all)
	}
	for _, m := range all {
		if !covered[m] {
			t.Errorf("RPC %s is not in the cross-tenant matrix: add it with its expected outcome per role", m)
		}
		delete(covered, m)
	}
	for m := range covered {
		t.Errorf("matrix entry %s names no RPC of a meridian.v1 service", m)
	}
}

// matrixTable renders the expectations, one line per RPC variant.
func matrixTable(ops []matrixOp) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-48s", "RPC")
	for _, r := range roles {
		fmt.Fprintf(&b, " %-13s", r)
	}
	b.WriteString("\n")
	for _, op := range ops {
		fmt.Fprintf(&b, "%-48s", op.name)
		for _, r := range roles {
			fmt.Fprintf(&b, " %-13s", strings.ReplaceAll(op.expect[r], " ", "/"))
		}
		b.WriteString("\n")
	}
	return b.String()
}
