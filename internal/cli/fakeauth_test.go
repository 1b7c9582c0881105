package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// fakeAuth is the fake hub's identity side: which bearer tokens it
// accepts (when tokens is not nil, every call needs one), the API tokens
// and audit events it stores, and what it saw.
type fakeAuth struct {
	// tokens maps an accepted bearer token to its principal; nil turns
	// authentication off (every caller is "anonymous", method none).
	tokens map[string]*meridianv1.Principal
	// perms are the permissions WhoAmI reports for every caller.
	perms []string
	// deny, when set, refuses every mutation of that method (full name)
	// with PermissionDenied and this reason.
	deny map[string]string

	seen      []string // authorization header of each call, "" when none
	apiTokens []*meridianv1.APIToken
	audit     []*meridianv1.AuditEvent
	auditReqs []*meridianv1.ListAuditEventsRequest
	createReq []*meridianv1.CreateAPITokenRequest
	nextToken int
}

type principalKey struct{}

// authenticate checks the call's credentials as the hub would.
func (h *fakeHub) authenticate(ctx context.Context, method string) (context.Context, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	authz := ""
	if v := md.Get("authorization"); len(v) > 0 {
		authz = v[0]
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.auth.seen = append(h.auth.seen, authz)
	var p *meridianv1.Principal
	if pr, ok := peer.FromContext(ctx); ok {
		if ti, ok := pr.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 {
			cert := ti.State.VerifiedChains[0][0]
			p = &meridianv1.Principal{User: cert.Subject.CommonName, Groups: cert.Subject.Organization, Method: "cert"}
		}
	}
	if h.auth.tokens != nil && authz != "" {
		tok, ok := strings.CutPrefix(authz, "Bearer ")
		if !ok {
			return nil, status.Error(codes.Unauthenticated, "unsupported authorization scheme")
		}
		tp, ok := h.auth.tokens[tok]
		if !ok {
			return nil, status.Error(codes.Unauthenticated, "token is not valid or has expired")
		}
		p = tp
	}
	if p == nil {
		if h.auth.tokens != nil {
			return nil, status.Error(codes.Unauthenticated, "no credentials: send a bearer token")
		}
		p = &meridianv1.Principal{User: "anonymous", Method: "none"}
	}
	if reason, ok := h.auth.deny[method]; ok {
		st, _ := status.New(codes.PermissionDenied, reason).WithDetails(&errdetails.ErrorInfo{
			Reason: "PERMISSION_DENIED", Domain: "meridian.io",
			Metadata: map[string]string{"user": p.GetUser()},
		})
		return nil, st.Err()
	}
	return context.WithValue(ctx, principalKey{}, p), nil
}

func (h *fakeHub) unaryAuth(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, err := h.authenticate(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

type authedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s authedStream) Context() context.Context { return s.ctx }

func (h *fakeHub) streamAuth(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, err := h.authenticate(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return handler(srv, authedStream{ServerStream: ss, ctx: ctx})
}

// serveTLS serves h with TLS on a free loopback port.
func (h *fakeHub) serveTLS(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	return h.serveOn(t, lis, grpc.Creds(credentials.NewTLS(cfg)),
		grpc.ChainUnaryInterceptor(h.unaryAuth), grpc.ChainStreamInterceptor(h.streamAuth))
}

// seenAuth returns the authorization headers received so far.
func (h *fakeHub) seenAuth() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.auth.seen...)
}

func caller(ctx context.Context) *meridianv1.Principal {
	p, _ := ctx.Value(principalKey{}).(*meridianv1.Principal)
	return p
}

func (h *fakeHub) WhoAmI(ctx context.Context, _ *meridianv1.WhoAmIRequest) (*meridianv1.WhoAmIResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.fail(); err != nil {
		return nil, err
	}
	return &meridianv1.WhoAmIResponse{Principal: caller(ctx), Permissions: h.auth.perms}, nil
}

func (h *fakeHub) CreateAPIToken(ctx context.Context, req *meridianv1.CreateAPITokenRequest) (*meridianv1.CreateAPITokenResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.fail(); err != nil {
		return nil, err
	}
	h.auth.createReq = append(h.auth.createReq, proto.Clone(req).(*meridianv1.CreateAPITokenRequest))
	in := req.GetToken()
	if len(in.GetDescription()) > 256 {
		st, _ := status.New(codes.InvalidArgument, "invalid token").WithDetails(&errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "token.description", Description: "at most 256 characters"}},
		})
		return nil, st.Err()
	}
	h.auth.nextToken++
	id := fmt.Sprintf("tk%04d", h.auth.nextToken)
	ttl := 90 * 24 * time.Hour
	if req.GetTtl() != nil {
		ttl = req.GetTtl().AsDuration()
	}
	tok := proto.Clone(in).(*meridianv1.APIToken)
	tok.Id = id
	tok.CreateTime = ts(time.Hour)
	tok.ExpireTime = ts(time.Hour + ttl)
	tok.CreatedBy = caller(ctx).GetUser()
	h.auth.apiTokens = append(h.auth.apiTokens, tok)
	return &meridianv1.CreateAPITokenResponse{Token: tok, Secret: fmt.Sprintf("mrd_%s_S3CRETs3cretS3CRET%04d", id, h.auth.nextToken)}, nil
}

func (h *fakeHub) ListAPITokens(_ context.Context, req *meridianv1.ListAPITokensRequest) (*meridianv1.ListAPITokensResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.fail(); err != nil {
		return nil, err
	}
	return pageOf(h.auth.apiTokens, req.GetPageToken(), int(req.GetPageSize()), h.pageCap, func(items []*meridianv1.APIToken, next string) *meridianv1.ListAPITokensResponse {
		return &meridianv1.ListAPITokensResponse{Tokens: items, NextPageToken: next}
	})
}

func (h *fakeHub) RevokeAPIToken(_ context.Context, req *meridianv1.RevokeAPITokenRequest) (*meridianv1.APIToken, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.fail(); err != nil {
		return nil, err
	}
	for _, tk := range h.auth.apiTokens {
		if tk.GetId() == req.GetId() {
			if tk.RevokeTime == nil {
				tk.RevokeTime = ts(time.Hour)
			}
			return tk, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "API token %s not found", req.GetId())
}

func (h *fakeHub) ListAuditEvents(_ context.Context, req *meridianv1.ListAuditEventsRequest) (*meridianv1.ListAuditEventsResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.fail(); err != nil {
		return nil, err
	}
	h.auth.auditReqs = append(h.auth.auditReqs, proto.Clone(req).(*meridianv1.ListAuditEventsRequest))
	var match []*meridianv1.AuditEvent
	for _, ev := range h.auth.audit {
		switch {
		case req.GetUser() != "" && ev.GetPrincipal().GetUser() != req.GetUser(),
			req.GetVerb() != "" && ev.GetVerb() != req.GetVerb(),
			req.GetTarget() != "" && !strings.HasPrefix(ev.GetTarget(), req.GetTarget()),
			req.GetSince() != nil && ev.GetTime().AsTime().Before(req.GetSince().AsTime()),
			req.GetUntil() != nil && !ev.GetTime().AsTime().Before(req.GetUntil().AsTime()),
			req.GetResult() != meridianv1.AuditResult_AUDIT_RESULT_UNSPECIFIED && ev.GetResult() != req.GetResult():
			continue
		}
		match = append(match, ev)
	}
	sort.SliceStable(match, func(i, j int) bool { return match[i].GetTime().AsTime().After(match[j].GetTime().AsTime()) })
	return pageOf(match, req.GetPageToken(), int(req.GetPageSize()), h.pageCap, func(items []*meridianv1.AuditEvent, next string) *meridianv1.ListAuditEventsResponse {
		return &meridianv1.ListAuditEventsResponse{Events: items, NextPageToken: next}
	})
}

// seedAuth gives the seeded hub access lists, a submit policy, API tokens
// and audit events.
func (h *fakeHub) seedAuth() {
	maxPrio, nonPre := int32(100), false
	h.queues["acme"].Access = []*meridianv1.AccessEntry{
		{Subject: "user:alice", Verbs: []string{"manage"}},
	}
	h.queues["acme/vision"].Access = []*meridianv1.AccessEntry{
		{Subject: "group:ml-research", Verbs: []string{"view", "submit"}},
		{Subject: "token:tk0001", Verbs: []string{"submit"}},
	}
	h.queues["acme/vision"].SubmitPolicy = &meridianv1.SubmitPolicy{MaxPriority: &maxPrio, AllowNonPreemptible: &nonPre}
	h.auth.perms = []string{"queues.create", "tokens.create", "audit.read"}
	h.auth.nextToken = 2
	h.auth.apiTokens = []*meridianv1.APIToken{
		{Id: "tk0001", Description: "CI for acme vision", Groups: []string{"acme-ci"}, CreatedBy: "alice",
			CreateTime: ts(-48 * time.Hour), ExpireTime: ts(30 * 24 * time.Hour), LastUsedTime: ts(55 * time.Minute)},
		{Id: "tk0002", Description: "terraform", User: "terraform", Permissions: []string{"queues.create"}, CreatedBy: "bob",
			CreateTime: ts(-72 * time.Hour), ExpireTime: ts(-time.Hour), RevokeTime: ts(-2 * time.Hour)},
	}
	alice := &meridianv1.Principal{User: "alice", Groups: []string{"ml-research"}, Method: "oidc"}
	ci := &meridianv1.Principal{User: "token:tk0001", Method: "token", TokenId: "tk0001"}
	h.auth.audit = []*meridianv1.AuditEvent{
		{Id: "ev1", Time: ts(10 * time.Minute), Principal: alice, Rpc: "/meridian.v1.QueueService/UpdateQueue", Verb: "queues.update",
			Target: "acme/vision", Result: meridianv1.AuditResult_AUDIT_RESULT_ALLOWED, Code: "OK"},
		{Id: "ev2", Time: ts(20 * time.Minute), Principal: ci, Rpc: "/meridian.v1.WorkloadService/SubmitWorkload", Verb: "workloads.submit",
			Target: "acme/search", Result: meridianv1.AuditResult_AUDIT_RESULT_DENIED, Code: "PERMISSION_DENIED",
			Reason: "you may not submit to queue acme/search: it needs submit on the queue or an ancestor"},
		{Id: "ev3", Time: ts(30 * time.Minute), Principal: &meridianv1.Principal{}, Rpc: "/meridian.v1.QueueService/CreateQueue",
			Result: meridianv1.AuditResult_AUDIT_RESULT_UNAUTHENTICATED, Code: "UNAUTHENTICATED", Reason: "token is not valid or has expired"},
		{Id: "ev4", Time: ts(40 * time.Minute), Principal: alice, Rpc: "/meridian.v1.WorkloadService/CancelWorkload", Verb: "workloads.cancel",
			Target: "wl-03", Result: meridianv1.AuditResult_AUDIT_RESULT_FAILED, Code: "FAILED_PRECONDITION", Reason: "workload already finished"},
		{Id: "ev5", Time: ts(50 * time.Minute), Principal: alice, Rpc: "/meridian.v1.AdminService/CreateAPIToken", Verb: "tokens.create",
			Target: "tk0001", Result: meridianv1.AuditResult_AUDIT_RESULT_ALLOWED, Code: "OK"},
	}
}
