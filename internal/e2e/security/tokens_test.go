package security

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meridian-gpu/meridian/hub/authz"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// TestAPITokens: the secret is shown once and never listed; a narrower
// token cannot do more; nobody mints a permission, user or group it does
// not hold; revocation takes effect at once on this hub.
func TestAPITokens(t *testing.T) {
	w := newWorld(t)
	alice := w.creds[roleTAdmin]

	id, secret := w.mustCreateToken(t, alice, &meridianv1.APIToken{Description: "alice's ci", User: "alice", Groups: []string{"a-admins"}})
	if !strings.HasPrefix(secret, "mrd_"+id+"_") {
		t.Fatalf("the secret %q... does not carry the id %s", secret[:8], id)
	}
	tokCred := cred{name: "alice-token", header: bearer(secret), user: "alice"}
	secretPart := secret[strings.LastIndexByte(secret, '_')+1:]

	t.Run("listing never shows a secret or its hash", func(t *testing.T) {
		for _, c := range []cred{alice, w.adminCred()} {
			r := w.rest(t, nil, c, http.MethodGet, "/v1/tokens?page_size=1000", nil, "")
			if r.status != http.StatusOK || !strings.Contains(string(r.body), id) {
				t.Fatalf("GET /v1/tokens as %s: %d %s", c.name, r.status, r.body)
			}
			body := strings.ToLower(string(r.body))
			for _, bad := range []string{secretPart, "secret", "sha256", "hash"} {
				if strings.Contains(body, bad) {
					t.Fatalf("GET /v1/tokens as %s holds %q", c.name, bad)
				}
			}
			resp := &meridianv1.ListAPITokensResponse{}
			if err := w.invoke(c, authz.MethodListAPITokens, &meridianv1.ListAPITokensRequest{}, resp, ""); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(resp.String(), secretPart) {
				t.Fatalf("ListAPITokens as %s returned the secret", c.name)
			}
		}
	})
	t.Run("the token acts as its user and groups", func(t *testing.T) {
		who := &meridianv1.WhoAmIResponse{}
		if err := w.invoke(tokCred, admSvc+"WhoAmI", &meridianv1.WhoAmIRequest{}, who, ""); err != nil {
			t.Fatal(err)
		}
		if who.GetPrincipal().GetUser() != "alice" || who.GetPrincipal().GetMethod() != "token" || len(who.GetPermissions()) != 0 {
			t.Fatalf("WhoAmI with the token: %v", who)
		}
		w.mustSubmit(t, tokCred, leafWorkload(leafA, "by-token"))
	})
	t.Run("a token with fewer permissions cannot do more", func(t *testing.T) {
		// alice holds tokens.create; her token was minted without it.
		err := w.invoke(tokCred, authz.MethodCreateAPIToken, &meridianv1.CreateAPITokenRequest{Token: &meridianv1.APIToken{Description: "more"}}, &meridianv1.CreateAPITokenResponse{}, "")
		if codeOf(err) != codes.PermissionDenied {
			t.Fatalf("a token without tokens.create minted one: %v", err)
		}
		// An admin's token bound to workloads.view_all only sees everything
		// and changes nothing.
		_, viewSecret := w.mustCreateToken(t, w.adminCred(), &meridianv1.APIToken{Description: "viewer", Permissions: []string{string(authz.PermWorkloadsViewAll)}})
		viewer := cred{name: "view-token", header: bearer(viewSecret)}
		if err := w.invoke(viewer, wlSvc+"GetWorkload", &meridianv1.GetWorkloadRequest{Id: w.wB}, &meridianv1.Workload{}, ""); err != nil {
			t.Fatalf("a view_all token reads tenant-b: %v", err)
		}
		err = w.invoke(viewer, qSvc+"CreateQueue", &meridianv1.CreateQueueRequest{Queue: &meridianv1.Queue{Path: "by-view-token"}}, &meridianv1.Queue{}, "")
		if codeOf(err) != codes.PermissionDenied {
			t.Fatalf("a view_all token created a tenant: %v", err)
		}
		err = w.invoke(viewer, wlSvc+"CancelWorkload", &meridianv1.CancelWorkloadRequest{Id: w.wB}, &meridianv1.Workload{}, "")
		if codeOf(err) != codes.PermissionDenied {
			t.Fatalf("a view_all token cancelled a workload: %v", err)
		}
	})
	t.Run("nobody mints what it does not hold", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			tok   *meridianv1.APIToken
			words string
		}{
			{"admin permission", &meridianv1.APIToken{Permissions: []string{string(authz.PermAdmin)}}, "you do not hold it"},
			{"audit.read", &meridianv1.APIToken{Permissions: []string{string(authz.PermAuditRead)}}, "you do not hold it"},
			{"another user", &meridianv1.APIToken{User: "bob"}, "only as its creator"},
			{"another tenant's group", &meridianv1.APIToken{Groups: []string{"b-admins"}}, "not in group"},
			{"a platform group", &meridianv1.APIToken{Groups: []string{"platform-admins"}}, "not in group"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				before := w.snapshot(t)
				rid := w.nextRequestID("mint")
				err := w.invoke(alice, authz.MethodCreateAPIToken, &meridianv1.CreateAPITokenRequest{Token: tc.tok}, &meridianv1.CreateAPITokenResponse{}, rid)
				if codeOf(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), tc.words) {
					t.Fatalf("%v; want PermissionDenied saying %q", err, tc.words)
				}
				if d := diffState(before, w.snapshot(t)); d != "" {
					t.Fatalf("a refused mint changed state: %s", d)
				}
				w.waitAudit(t, rid, string(authz.ActTokenCreate), "alice", meridianv1.AuditResult_AUDIT_RESULT_DENIED)
			})
		}
	})
	t.Run("last use is recorded", func(t *testing.T) {
		var last *meridianv1.APIToken
		for i := 0; i < 200; i++ {
			resp := &meridianv1.ListAPITokensResponse{}
			if err := w.invoke(alice, authz.MethodListAPITokens, &meridianv1.ListAPITokensRequest{}, resp, ""); err != nil {
				t.Fatal(err)
			}
			for _, tok := range resp.GetTokens() {
				if tok.GetId() == id {
					last = tok
				}
			}
			if last.GetLastUsedTime() != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("token %s used but its last use never recorded: %v", id, last)
	})
	t.Run("revocation takes effect at once", func(t *testing.T) {
		if err := w.invoke(tokCred, admSvc+"WhoAmI", &meridianv1.WhoAmIRequest{}, &meridianv1.WhoAmIResponse{}, ""); err != nil {
			t.Fatalf("before revocation: %v", err)
		}
		rev := &meridianv1.APIToken{}
		if err := w.invoke(alice, authz.MethodRevokeAPIToken, &meridianv1.RevokeAPITokenRequest{Id: id}, rev, ""); err != nil {
			t.Fatal(err)
		}
		if rev.GetRevokeTime() == nil {
			t.Fatalf("revoked token has no revoke time: %v", rev)
		}
		err := w.invoke(tokCred, admSvc+"WhoAmI", &meridianv1.WhoAmIRequest{}, &meridianv1.WhoAmIResponse{}, "")
		if codeOf(err) != codes.Unauthenticated || !strings.Contains(status.Convert(err).Message(), "revoked") {
			t.Fatalf("right after revocation: %v; want Unauthenticated, revoked", err)
		}
		r := w.rest(t, nil, tokCred, http.MethodGet, "/v1/whoami", nil, "")
		if r.status != http.StatusUnauthorized {
			t.Fatalf("REST right after revocation: %d", r.status)
		}
	})
}
