package api

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/meridian-gpu/meridian/hub/audit"
	"github.com/meridian-gpu/meridian/hub/auth"
	"github.com/meridian-gpu/meridian/hub/authz"
	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// Metadata the hub's own REST gateway adds to the requests it forwards
// over its in-process connection: the REST caller's verified client
// certificate (base64 DER), why it did not verify, and its address. The
// guard trusts these keys only on that connection, and the gateway drops
// any a client sends itself.
const (
	mdClientCert      = "x-meridian-client-cert"
	mdClientCertError = "x-meridian-client-cert-error"
	mdRemoteAddr      = "x-meridian-remote-addr"
	mdReservedPrefix  = "x-meridian-"
)

// GuardConfig configures the API's one authentication and authorization
// layer.
type GuardConfig struct {
	// Authenticator turns a request's credentials into a principal.
	// Required.
	Authenticator auth.Authenticator
	// Authorization maps groups and users to global permissions.
	Authorization *authz.Config
	// Audit receives every mutation and every refused request; nil
	// records nothing.
	Audit *audit.Recorder
	// VerifyClient checks a gRPC caller's client certificate chain (the
	// listener requests certificates without verifying them); nil means
	// client certificates are ignored.
	VerifyClient func([]*x509.Certificate) ([][]*x509.Certificate, error)
	// Trusted reports whether a connection is the hub's own gateway pipe,
	// whose forwarded metadata may be believed.
	Trusted func(net.Addr) bool
	// Logger receives denials at debug level; nil drops them.
	Logger *slog.Logger
}

// Guard authenticates every RPC, authorizes it through authz's one table,
// records the audit event and hands the handler the caller. Handlers never
// check permissions themselves; lists and watches filter with
// callerFrom(ctx).
type Guard struct {
	cfg GuardConfig
	log *slog.Logger

	// The authorizer is rebuilt when the queues' access lists change
	// (checked at most every policyCheckEvery, and at once after a queue
	// write through this replica).
	cache    *store.Cache
	mu       sync.Mutex
	az       *authz.Authorizer
	azPrint  [2]int64 // number of queues and their largest mod revision
	azAt     time.Time
	azStale  bool
	resolver authz.Resolvers
}

// policyCheckEvery bounds how late an access-list change made on another
// hub replica is seen here.
const policyCheckEvery = time.Second

// NewGuard checks cfg.
func NewGuard(cfg GuardConfig) (*Guard, error) {
	if cfg.Authenticator == nil {
		return nil, errors.New("api: GuardConfig.Authenticator is required")
	}
	if cfg.Authorization == nil {
		cfg.Authorization = &authz.Config{}
	}
	g := &Guard{cfg: cfg, log: cfg.Logger, azStale: true}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if _, err := authz.New(cfg.Authorization, nil); err != nil {
		return nil, err
	}
	return g, nil
}

// Caller is the authenticated, authorized caller of one request.
type Caller struct {
	Principal *auth.Principal
	Authz     *authz.Principal
	// Decision is the guard's answer for this request (OwnOnly limits
	// ListAPITokens to the caller's own tokens).
	Decision authz.Decision
}

type callerKey struct{}

// callerFrom returns the request's caller; nil when the service runs
// without a guard (every caller sees everything).
func callerFrom(ctx context.Context) *Caller {
	c, _ := ctx.Value(callerKey{}).(*Caller)
	return c
}

// canView reports whether the request's caller may see queue's workloads
// and the queue itself.
func canView(ctx context.Context, queue string) bool {
	c := callerFrom(ctx)
	return c == nil || c.Authz.CanView(queue)
}

// attach gives the guard the service's cache (queue access lists,
// workload queues).
func (g *Guard) attach(s *Service) {
	g.cache = s.d.Workloads
	g.resolver = authz.Resolvers{Workloads: workloadQueues{s}}
	if s.d.Tokens != nil {
		g.resolver.Tokens = tokenOwners{s.d.Tokens}
	}
}

// workloadQueues answers authz's "which queue is this workload in" from
// the watch cache.
type workloadQueues struct{ s *Service }

func (w workloadQueues) QueueOf(id string) (string, bool) {
	wl, ok := w.get(id)
	return wl.GetQueue(), ok
}

// OwnerOf implements authz.WorkloadOwnerResolver: who submitted it.
func (w workloadQueues) OwnerOf(id string) (string, bool) {
	wl, ok := w.get(id)
	return wl.GetSubmittedBy(), ok && wl.GetSubmittedBy() != ""
}

func (w workloadQueues) get(id string) (*meridianv1.Workload, bool) {
	if !validWorkloadID(id) {
		return nil, false
	}
	key, err := WorkloadKey(id)
	if err != nil {
		return nil, false
	}
	val := []byte(nil)
	if it, ok := w.s.d.Workloads.Get(key); ok {
		val = it.Value
	} else {
		// Not in the cache yet (submitted a moment ago): ask etcd, so a
		// client reading its own write is not told "not found".
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		b, _, err := w.s.st.Get(ctx, key)
		if err != nil {
			return nil, false
		}
		val = b
	}
	wl, err := DecodeWorkloadRecord(val)
	if err != nil {
		return nil, false
	}
	return wl, true
}

// invalidate makes the next request rebuild the authorizer (after a
// queue write through this replica, so its author sees it at once).
func (g *Guard) invalidate() {
	g.mu.Lock()
	g.azStale = true
	g.mu.Unlock()
}

// authorizer returns the authorizer for the current queue tree.
func (g *Guard) authorizer() (*authz.Authorizer, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if g.az != nil && !g.azStale && now.Sub(g.azAt) < policyCheckEvery {
		return g.az, nil
	}
	g.azAt = now
	fp, queues := g.queuePolicies(g.az == nil || g.azStale)
	if g.az != nil && !g.azStale && fp == g.azPrint {
		return g.az, nil
	}
	if queues == nil {
		_, queues = g.queuePolicies(true)
	}
	az, err := authz.New(g.cfg.Authorization, queues)
	if err != nil {
		// A stored access list the authorizer refuses (written before a
		// rule tightened): keep the last good one and say so.
		g.log.Error("api: the queues' access lists do not compile; keeping the last good ones", "err", err)
		if g.az == nil {
			return nil, err
		}
		return g.az, nil
	}
	g.az, g.azPrint, g.azStale = az, fp, false
	return az, nil
}

// queuePolicies fingerprints the stored queues and, when decode is set,
// returns their policies.
func (g *Guard) queuePolicies(decode bool) ([2]int64, authz.Queues) {
	var fp [2]int64
	if g.cache == nil {
		return fp, authz.Queues{}
	}
	var items []store.Item
	g.cache.Descend(store.Prefix(store.KindQueues), "", 1<<30, func(it store.Item) bool {
		fp[0]++
		fp[1] = max(fp[1], it.ModRev)
		if decode {
			items = append(items, it)
		}
		return true
	})
	if !decode {
		return fp, nil
	}
	out := authz.Queues{}
	for _, it := range items {
		q, err := DecodeQueueRecord(it.Value)
		if err != nil {
			continue
		}
		if p, ok := queuePolicy(q); ok {
			out[q.GetPath()] = p
		}
	}
	return fp, out
}

// queuePolicy converts a queue's access list and submit policy.
func queuePolicy(q *meridianv1.Queue) (authz.QueuePolicy, bool) {
	var p authz.QueuePolicy
	for _, e := range q.GetAccess() {
		ent := authz.Entry{Subject: e.GetSubject()}
		for _, v := range e.GetVerbs() {
			ent.Verbs = append(ent.Verbs, authz.Verb(v))
		}
		p.Access = append(p.Access, ent)
	}
	if sp := q.GetSubmitPolicy(); sp != nil {
		p.MaxPriority = sp.MaxPriority
		p.AllowNonPreemptible = sp.AllowNonPreemptible
	}
	return p, len(p.Access) > 0 || p.MaxPriority != nil || p.AllowNonPreemptible != nil
}

// credentials collects what the request proves about its caller. It
// reads each metadata key with metadata.ValueFromIncomingContext, as every
// per-call lookup here does: FromIncomingContext copies every key and
// value of the call (a fifth of the guard's time at 2,000 submits/s).
func (g *Guard) credentials(ctx context.Context) (auth.Credentials, string, error) {
	var cr auth.Credentials
	if v := metadata.ValueFromIncomingContext(ctx, "authorization"); len(v) == 1 {
		cr.Authorization = v[0]
	} else if len(v) > 1 {
		cr.MultipleAuthorization = true
	}
	p, _ := peer.FromContext(ctx)
	var addr net.Addr
	if p != nil {
		addr = p.Addr
	}
	cr.RemoteAddr = addr
	remote := ""
	if addr != nil {
		remote = addr.String()
	}
	if addr != nil && g.cfg.Trusted != nil && g.cfg.Trusted(addr) {
		// A REST request: the gateway verified the caller's certificate.
		if v := metadata.ValueFromIncomingContext(ctx, mdRemoteAddr); len(v) == 1 {
			remote = v[0]
			if ta, err := net.ResolveTCPAddr("tcp", v[0]); err == nil {
				cr.RemoteAddr = ta
			}
		}
		if v := metadata.ValueFromIncomingContext(ctx, mdClientCertError); len(v) == 1 && cr.Authorization == "" {
			return cr, remote, errors.New(v[0])
		}
		if v := metadata.ValueFromIncomingContext(ctx, mdClientCert); len(v) == 1 {
			der, err := base64.StdEncoding.DecodeString(v[0])
			if err == nil {
				if c, err := x509.ParseCertificate(der); err == nil {
					cr.VerifiedChains = [][]*x509.Certificate{{c}}
				}
			}
		}
		return cr, remote, nil
	}
	if p != nil && g.cfg.VerifyClient != nil {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			chains, err := g.cfg.VerifyClient(ti.State.PeerCertificates)
			if err != nil && cr.Authorization == "" {
				return cr, remote, err
			}
			cr.VerifiedChains = chains
		}
	}
	return cr, remote, nil
}

// admit authenticates and authorizes one call. On a refusal it records
// the audit event and returns the error to send.
func (g *Guard) admit(ctx context.Context, method string, req any) (context.Context, *authz.Decision, error) {
	rule, known := authz.RuleFor(method)
	if known && rule.Resource == authz.ResourceOpen {
		return ctx, nil, nil
	}
	cr, remote, certErr := g.credentials(ctx)
	ev := &meridianv1.AuditEvent{Rpc: method, RequestId: requestID(ctx), RemoteAddr: remote}
	var pr *auth.Principal
	err := certErr
	if err == nil {
		pr, err = g.cfg.Authenticator.Authenticate(ctx, cr)
	}
	if err != nil {
		code, reason := codes.Unauthenticated, auth.ClientReason(err)
		if certErr != nil {
			reason = "client certificate not accepted: it is not signed by the hub's client CA"
		}
		if auth.IsUnavailable(err) {
			code = codes.Unavailable
		}
		if known {
			ev.Verb = string(rule.Action)
		}
		ev.Result, ev.Code, ev.Reason = meridianv1.AuditResult_AUDIT_RESULT_UNAUTHENTICATED, code.String(), auditDetail(err)
		g.cfg.Audit.Record(ev)
		return ctx, nil, status.Error(code, reason)
	}
	ev.Principal = principalProto(pr)
	az, err := g.authorizer()
	if err != nil {
		return ctx, nil, status.Errorf(codes.Internal, "authorization is not available: %v", err)
	}
	ap := az.Bind(subjectOf(pr))
	d := ap.AuthorizeMethod(method, req, g.resolver)
	ev.Verb, ev.Target = string(d.Action), targetName(d.Target)
	if !d.Allowed {
		ev.Result, ev.Code, ev.Reason = meridianv1.AuditResult_AUDIT_RESULT_DENIED, d.GRPCCode().String(), d.Detail()
		g.cfg.Audit.Record(ev)
		g.log.Debug("api: request refused", "method", method, "user", pr.User, "detail", d.Detail())
		return ctx, nil, status.Error(d.GRPCCode(), d.Reason)
	}
	return context.WithValue(ctx, callerKey{}, &Caller{Principal: pr, Authz: ap, Decision: d}), &d, nil
}

// done records the audit event of an allowed mutation once it ran.
func (g *Guard) done(ctx context.Context, method string, d *authz.Decision, err error) {
	if d == nil || !mutates(d.Action) {
		return
	}
	if d.Action == authz.ActQueueCreate || d.Action == authz.ActQueueUpdate || d.Action == authz.ActQueueDelete {
		g.invalidate()
	}
	c := callerFrom(ctx)
	ev := &meridianv1.AuditEvent{Rpc: method, RequestId: requestID(ctx), Verb: string(d.Action), Target: targetName(d.Target),
		Result: meridianv1.AuditResult_AUDIT_RESULT_ALLOWED, Code: status.Code(err).String()}
	if c != nil {
		ev.Principal = principalProto(c.Principal)
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		ev.RemoteAddr = p.Addr.String()
	}
	if err != nil {
		ev.Result, ev.Reason = meridianv1.AuditResult_AUDIT_RESULT_FAILED, status.Convert(err).Message()
	}
	g.cfg.Audit.Record(ev)
}

// mutates reports whether an allowed action changes state (and so is
// audited; reads are audited only when refused).
func mutates(a authz.Action) bool {
	switch a {
	case authz.ActWorkloadSubmit, authz.ActWorkloadCancel, authz.ActQueueCreate, authz.ActQueueUpdate, authz.ActQueueDelete,
		authz.ActClusterDrain, authz.ActClusterResume, authz.ActClusterRegister, authz.ActTokenCreate, authz.ActTokenRevoke:
		return true
	}
	return false
}

// Unary is the guard's unary interceptor.
func (g *Guard) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		ctx, d, err := g.admit(ctx, info.FullMethod, req)
		if err != nil {
			return nil, err
		}
		resp, err := h(ctx, req)
		g.done(ctx, info.FullMethod, d, err)
		return resp, err
	}
}

// Stream is the guard's stream interceptor: streams are decided before
// their first message (their results are filtered per item).
func (g *Guard) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		ctx, d, err := g.admit(ss.Context(), info.FullMethod, nil)
		if err != nil {
			return err
		}
		err = h(srv, &guardedStream{ServerStream: ss, ctx: ctx})
		g.done(ctx, info.FullMethod, d, err)
		return err
	}
}

type guardedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *guardedStream) Context() context.Context { return s.ctx }

func subjectOf(p *auth.Principal) authz.Subject {
	s := authz.Subject{User: p.User, Groups: p.Groups, TokenID: p.TokenID}
	if p.Method == auth.MethodToken {
		for _, r := range p.Roles {
			s.TokenPermissions = append(s.TokenPermissions, authz.Permission(r))
		}
	}
	return s
}

func principalProto(p *auth.Principal) *meridianv1.Principal {
	if p == nil {
		return nil
	}
	return &meridianv1.Principal{User: p.User, Groups: p.Groups, Method: string(p.Method), TokenId: p.TokenID}
}

// targetName is the audit event's target: the most specific id.
func targetName(t authz.Target) string {
	switch {
	case t.Workload != "":
		return t.Workload
	case t.Cluster != "":
		return t.Cluster
	case t.Token != "":
		return t.Token
	}
	return t.Queue
}

func auditDetail(err error) string {
	if d := auth.AuditDetail(err); d != "" {
		return d
	}
	return err.Error()
}

func requestID(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, "x-request-id"); len(v) > 0 {
		return v[0]
	}
	return ""
}

// isReservedMetadata reports whether a metadata key is one only the
// gateway may set.
func isReservedMetadata(key string) bool {
	return strings.HasPrefix(strings.ToLower(key), mdReservedPrefix)
}

// GatewayCaller is the gateway option that tells the guard who a REST
// caller is: its address, and its client certificate verified with verify
// (nil: certificates are ignored). Only the hub's in-process gateway
// connection is trusted to carry it (GuardConfig.Trusted).
func GatewayCaller(verify func([]*x509.Certificate) ([][]*x509.Certificate, error)) runtime.ServeMuxOption {
	return runtime.WithMetadata(func(_ context.Context, r *http.Request) metadata.MD {
		md := metadata.MD{}
		md.Set(mdRemoteAddr, r.RemoteAddr)
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 || verify == nil {
			return md
		}
		chains, err := verify(r.TLS.PeerCertificates)
		if err != nil || len(chains) == 0 {
			md.Set(mdClientCertError, "client certificate not accepted")
			return md
		}
		md.Set(mdClientCert, base64.StdEncoding.EncodeToString(chains[0][0].Raw))
		return md
	})
}

// VerbMetricsRead is the audit verb of a refused GET /metrics.
const VerbMetricsRead = "metrics.read"

// Authenticated serves next only to an authenticated caller: the REST
// routes beside the API (GET /metrics) that carry no tenant data but are
// no business of a caller without credentials. It reads the same
// credentials as the API (a bearer token, or a client certificate of the
// hub's client CA) through the same authenticator; a refusal is 401 with
// the API's JSON error body and an UNAUTHENTICATED audit event naming
// route as its RPC. Under --auth=none every caller is local-admin.
func (g *Guard) Authenticated(route string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cr, certErr := g.httpCredentials(r)
		var err error = certErr
		if err == nil {
			_, err = g.cfg.Authenticator.Authenticate(r.Context(), cr)
		}
		if err == nil {
			next.ServeHTTP(w, r)
			return
		}
		code, reason := codes.Unauthenticated, auth.ClientReason(err)
		if certErr != nil {
			reason = "client certificate not accepted: it is not signed by the hub's client CA"
		}
		if auth.IsUnavailable(err) {
			code = codes.Unavailable
		}
		g.cfg.Audit.Record(&meridianv1.AuditEvent{Rpc: route, Verb: VerbMetricsRead, RequestId: r.Header.Get("X-Request-Id"),
			RemoteAddr: r.RemoteAddr, Result: meridianv1.AuditResult_AUDIT_RESULT_UNAUTHENTICATED, Code: code.String(), Reason: auditDetail(err)})
		w.Header().Set("Content-Type", "application/json")
		status := runtime.HTTPStatusFromCode(code)
		if code == codes.Unauthenticated {
			w.Header().Set("WWW-Authenticate", `Bearer realm="meridian"`)
		}
		w.WriteHeader(status)
		b, _ := json.Marshal(map[string]any{"code": int(code), "message": reason})
		_, _ = w.Write(append(b, '\n'))
	})
}

// httpCredentials collects what a plain HTTP request proves about its
// caller, as credentials does for a gRPC call.
func (g *Guard) httpCredentials(r *http.Request) (auth.Credentials, error) {
	var cr auth.Credentials
	if v := r.Header.Values("Authorization"); len(v) == 1 {
		cr.Authorization = v[0]
	} else if len(v) > 1 {
		cr.MultipleAuthorization = true
	}
	if ta, err := net.ResolveTCPAddr("tcp", r.RemoteAddr); err == nil {
		cr.RemoteAddr = ta
	}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 && g.cfg.VerifyClient != nil {
		chains, err := g.cfg.VerifyClient(r.TLS.PeerCertificates)
		if err != nil && cr.Authorization == "" {
			return cr, err
		}
		cr.VerifiedChains = chains
	}
	return cr, nil
}
