package security

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"

	"github.com/meridian-gpu/meridian/hub/authz"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// TestReflectionFollowsAuthentication: server reflection (what `grpcurl
// list` uses) follows the API's authorization: an unauthenticated caller
// cannot list or describe the services, over either reflection version,
// and the refusal is audited; any authenticated caller, even one with no
// permission, may. Health answers without credentials, for probes.
func TestReflectionFollowsAuthentication(t *testing.T) {
	f := startHub(t)
	nobody := f.oidcCred(t, "nobody") // authenticated, no group, no permission

	listV1 := func(c cred, rid string) ([]string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		stream, err := reflectionpb.NewServerReflectionClient(f.conn).ServerReflectionInfo(withCred(ctx, c, rid))
		if err != nil {
			return nil, err
		}
		// A stream the server refused at once may fail Send with io.EOF;
		// its status comes from Recv.
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil && err != io.EOF {
			return nil, err
		}
		resp, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		var names []string
		for _, s := range resp.GetListServicesResponse().GetService() {
			names = append(names, s.GetName())
		}
		return names, nil
	}
	describeV1Alpha := func(c cred, rid string) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		stream, err := reflectionv1alpha.NewServerReflectionClient(f.conn).ServerReflectionInfo(withCred(ctx, c, rid))
		if err != nil {
			return 0, err
		}
		if err := stream.Send(&reflectionv1alpha.ServerReflectionRequest{
			MessageRequest: &reflectionv1alpha.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "meridian.v1.Workload"}}); err != nil && err != io.EOF {
			return 0, err
		}
		resp, err := stream.Recv()
		if err != nil {
			return 0, err
		}
		return len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()), nil
	}

	for _, tc := range []struct {
		name string
		cred cred
	}{
		{"no credentials", cred{}},
		{"a forged token", cred{header: bearer(tamper(t, f.oidcToken(t, "mallory"), func(c map[string]any) { c["sub"] = "admin" }))}},
	} {
		t.Run("list, "+tc.name, func(t *testing.T) {
			rid := f.nextRequestID("reflect")
			names, err := listV1(tc.cred, rid)
			if codeOf(err) != codes.Unauthenticated || len(names) > 0 {
				t.Fatalf("reflection list: %v %v; want Unauthenticated and no names", names, err)
			}
			f.waitAudit(t, rid, string(authz.ActReflection), "", meridianv1.AuditResult_AUDIT_RESULT_UNAUTHENTICATED)
		})
		t.Run("describe (v1alpha), "+tc.name, func(t *testing.T) {
			n, err := describeV1Alpha(tc.cred, "")
			if codeOf(err) != codes.Unauthenticated || n > 0 {
				t.Fatalf("reflection describe: %d files, %v; want Unauthenticated", n, err)
			}
		})
	}
	t.Run("authenticated without any permission", func(t *testing.T) {
		names, err := listV1(nobody, "")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(names, "meridian.v1.WorkloadService") || !slices.Contains(names, "grpc.health.v1.Health") {
			t.Fatalf("reflection lists %v", names)
		}
		if n, err := describeV1Alpha(nobody, ""); err != nil || n == 0 {
			t.Fatalf("reflection describe: %d files, %v", n, err)
		}
	})
	t.Run("health needs no credentials", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		for { // health follows readiness, which it polls
			r, err := healthpb.NewHealthClient(f.conn).Check(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				t.Fatalf("health without credentials: %v", err)
			}
			if r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("health never SERVING: %v", r.GetStatus())
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// TestForwardedIdentityCannotBeForged: the REST gateway tells the guard
// who a REST caller is through x-meridian-* metadata on its in-process
// connection. A caller who sends those keys itself, as REST headers
// (Grpc-Metadata-X-Meridian-...) or as gRPC metadata, is not believed: a
// certificate of the hub's own client CA for a platform admin, pasted
// into a header, authenticates nobody and changes nothing, and a forged
// remote address does not reach the audit log.
func TestForwardedIdentityCannotBeForged(t *testing.T) {
	f := startHub(t)
	pair := f.ca.clientCert(t, 60, "mallory", "platform-admins")
	forged := base64.StdEncoding.EncodeToString(pair.Certificate[0])
	const fakeAddr = "203.0.113.7:4242"

	t.Run("REST headers", func(t *testing.T) {
		before := f.snapshot(t)
		rid := f.nextRequestID("forge")
		req, _ := http.NewRequest(http.MethodPost, f.restBase+"/v1/queues", strings.NewReader(`{"path":"forged-rest"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", rid)
		req.Header.Set("Grpc-Metadata-X-Meridian-Client-Cert", forged)
		req.Header.Set("Grpc-Metadata-X-Meridian-Remote-Addr", fakeAddr)
		resp, err := f.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("REST with a forged forwarded certificate: %d; want 401", resp.StatusCode)
		}
		ev := f.waitAudit(t, rid, string(authz.ActQueueCreate), "", meridianv1.AuditResult_AUDIT_RESULT_UNAUTHENTICATED)
		if strings.Contains(ev.GetRemoteAddr(), "203.0.113.7") {
			t.Errorf("the audit event records the forged address %q", ev.GetRemoteAddr())
		}
		if d := diffState(before, f.snapshot(t)); d != "" {
			t.Fatalf("state changed: %s", d)
		}
	})
	t.Run("gRPC metadata", func(t *testing.T) {
		before := f.snapshot(t)
		rid := f.nextRequestID("forge")
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "x-meridian-client-cert", forged, "x-meridian-remote-addr", fakeAddr, "x-request-id", rid)
		err := f.conn.Invoke(ctx, qSvc+"CreateQueue", &meridianv1.CreateQueueRequest{Queue: &meridianv1.Queue{Path: "forged-grpc"}}, &meridianv1.Queue{})
		if codeOf(err) != codes.Unauthenticated {
			t.Fatalf("gRPC with a forged forwarded certificate: %v; want Unauthenticated", err)
		}
		ev := f.waitAudit(t, rid, string(authz.ActQueueCreate), "", meridianv1.AuditResult_AUDIT_RESULT_UNAUTHENTICATED)
		if strings.Contains(ev.GetRemoteAddr(), "203.0.113.7") {
			t.Errorf("the audit event records the forged address %q", ev.GetRemoteAddr())
		}
		if d := diffState(before, f.snapshot(t)); d != "" {
			t.Fatalf("state changed: %s", d)
		}
	})
}

// TestOnlyHealthRoutesAreOpen: /healthz and /readyz answer without
// credentials; /metrics needs an authenticated caller (any: it carries no
// tenant data), by bearer token or client certificate, and a refusal is
// 401 with an audit event.
func TestOnlyHealthRoutesAreOpen(t *testing.T) {
	f := startHub(t)
	for _, path := range []string{"/healthz", "/readyz"} {
		if r := f.rest(t, nil, cred{}, http.MethodGet, path, nil, ""); r.status != http.StatusOK {
			t.Errorf("GET %s without credentials: %d %s", path, r.status, r.body)
		}
	}
	refused := func(t *testing.T, client *http.Client, c cred) {
		t.Helper()
		rid := f.nextRequestID("metrics")
		r := f.rest(t, client, c, http.MethodGet, "/metrics", nil, rid)
		if r.status != http.StatusUnauthorized || strings.Contains(string(r.body), "meridian_") {
			t.Fatalf("GET /metrics: %d %s; want 401 and no metrics", r.status, truncate(string(r.body), 300))
		}
		if e := decodeRESTError(r.body); e.Code != int(codes.Unauthenticated) || e.Message == "" {
			t.Fatalf("GET /metrics refusal body %s; want the API's error with code 16", r.body)
		}
		ev := f.waitAudit(t, rid, "metrics.read", "", meridianv1.AuditResult_AUDIT_RESULT_UNAUTHENTICATED)
		if ev.GetRpc() != "GET /metrics" || ev.GetReason() == "" {
			t.Errorf("audit event %v", ev)
		}
		noSecret(t, ev.String(), c.header)
	}
	allowed := func(t *testing.T, client *http.Client, c cred) {
		t.Helper()
		r := f.rest(t, client, c, http.MethodGet, "/metrics", nil, "")
		if r.status != http.StatusOK || !strings.Contains(string(r.body), "meridian_api_requests_total") {
			t.Fatalf("GET /metrics: %d %s", r.status, truncate(string(r.body), 300))
		}
	}
	t.Run("no credentials", func(t *testing.T) { refused(t, nil, cred{}) })
	t.Run("forged token", func(t *testing.T) {
		refused(t, nil, cred{header: bearer(tamper(t, f.oidcToken(t, "mallory"), func(c map[string]any) { c["sub"] = "admin" }))})
	})
	t.Run("malformed header", func(t *testing.T) { refused(t, nil, cred{header: "Basic YWRtaW46YWRtaW4="}) })
	t.Run("certificate from another CA", func(t *testing.T) {
		_, hc := f.mtlsClients(t, newTestCA(t, "someone-elses-ca").clientCert(t, 8, "mallory"))
		refused(t, hc, cred{})
	})
	t.Run("authenticated without any permission", func(t *testing.T) { allowed(t, nil, f.oidcCred(t, "scraper")) })
	t.Run("API token", func(t *testing.T) { allowed(t, nil, f.adminCred()) })
	t.Run("client certificate", func(t *testing.T) {
		_, hc := f.mtlsClients(t, f.ca.clientCert(t, 61, "prometheus", "monitoring"))
		allowed(t, hc, cred{})
	})
}
