package security

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/meridian-gpu/meridian/hub/auth"
	"github.com/meridian-gpu/meridian/hub/authz"
	"github.com/meridian-gpu/meridian/hub/store"
	"github.com/meridian-gpu/meridian/internal/testoidc"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// expiredAPIToken issues, straight into the hub's token store, an admin
// token that expired an hour ago (the API refuses lifetimes under an hour,
// so a clock an hour and a half behind issues it).
func (f *fixture) expiredAPIToken(t *testing.T) string {
	t.Helper()
	st, err := store.New(f.etcd, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	toks, err := auth.NewTokens(auth.TokensOptions{Store: auth.NewEtcdTokenStore(st), Now: func() time.Time { return time.Now().Add(-150 * time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	defer toks.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sec, _, err := toks.Issue(ctx, auth.IssueRequest{Name: "expired", User: "expired-bot", Roles: []string{string(authz.PermAdmin)}, CreatedBy: "test", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return sec.Reveal()
}

// tamper replaces a JWT's payload, keeping header and signature.
func tamper(t *testing.T, tok string, change func(map[string]any)) string {
	t.Helper()
	parts := strings.Split(tok, ".")
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	change(c)
	b, _ := json.Marshal(c)
	return parts[0] + "." + base64.RawURLEncoding.EncodeToString(b) + "." + parts[2]
}

// TestBadCredentials: every bad credential is Unauthenticated over gRPC
// and 401 over REST, changes nothing (it asks to create a tenant as
// platform-admins) and leaves an UNAUTHENTICATED audit event that never
// repeats the credential.
func TestBadCredentials(t *testing.T) {
	f := startHub(t)
	now := time.Now()
	claims := func(change func(map[string]any)) map[string]any {
		c := f.iss.Claims(audience, "mallory")
		c["groups"] = []string{"platform-admins"}
		if change != nil {
			change(c)
		}
		return c
	}
	good := f.iss.Token(t, claims(nil), nil)
	otherIssuer := testoidc.New(t) // a real issuer the hub does not trust
	strayKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	revokedID, revoked := f.mustCreateToken(t, f.adminCred(), &meridianv1.APIToken{Description: "to revoke", Permissions: []string{string(authz.PermAdmin)}})
	if err := f.invoke(f.adminCred(), authz.MethodRevokeAPIToken, &meridianv1.RevokeAPITokenRequest{Id: revokedID}, &meridianv1.APIToken{}, ""); err != nil {
		t.Fatal(err)
	}
	_, mdAdmin := f.mustCreateToken(t, f.adminCred(), &meridianv1.APIToken{Description: "well-formed", Permissions: []string{string(authz.PermAdmin)}})

	cases := []struct {
		name   string
		header string
		grpcMD []string // extra gRPC metadata instead of header (several values)
	}{
		{"expired OIDC token", bearer(f.iss.Token(t, claims(func(c map[string]any) {
			c["iat"], c["exp"] = now.Add(-2*time.Hour).Unix(), now.Add(-time.Hour).Unix()
		}), nil)), nil},
		{"OIDC token not yet valid (nbf)", bearer(f.iss.Token(t, claims(func(c map[string]any) { c["nbf"] = now.Add(time.Hour).Unix() }), nil)), nil},
		{"OIDC token issued in the future (iat)", bearer(f.iss.Token(t, claims(func(c map[string]any) { c["iat"] = now.Add(time.Hour).Unix() }), nil)), nil},
		{"wrong audience", bearer(f.iss.Token(t, claims(func(c map[string]any) { c["aud"] = "another-client" }), nil)), nil},
		{"untrusted issuer", bearer(otherIssuer.Token(t, func() map[string]any {
			c := otherIssuer.Claims(audience, "mallory")
			c["groups"] = []string{"platform-admins"}
			return c
		}(), nil)), nil},
		{"trusted issuer's URL in a token it did not sign", bearer(testoidc.SignWith(t, testoidc.RS256, strayKey, f.iss.KeyID(), claims(nil), nil)), nil},
		{"alg none", bearer(testoidc.Unsigned(t, map[string]any{"alg": "none", "typ": "JWT", "kid": f.iss.KeyID()}, claims(nil), nil)), nil},
		{"HS256 keyed with the RSA public key", bearer(testoidc.HS256(t, map[string]any{"typ": "JWT", "kid": f.iss.KeyID()}, claims(nil), f.iss.PublicKeyPEM(t))), nil},
		{"tampered payload", bearer(tamper(t, f.oidcToken(t, "mallory", "nobodies"), func(c map[string]any) { c["groups"] = []string{"platform-admins"} })), nil},
		{"signature stripped", bearer(good[:strings.LastIndexByte(good, '.')+1]), nil},
		{"unknown kid", bearer(testoidc.SignWith(t, testoidc.RS256, strayKey, "no-such-key", claims(nil), nil)), nil},
		{"revoked API token", bearer(revoked), nil},
		{"expired API token", bearer(f.expiredAPIToken(t)), nil},
		{"API token with a wrong secret", bearer(mdAdmin[:len(mdAdmin)-4] + "aaaa"), nil},
		{"API token id that does not exist", bearer(auth.TokenPrefix + "aaaaaaaaaaaaaaaa_" + strings.Repeat("b", 52)), nil},
		{"malformed header: no scheme", f.adminToken, nil},
		{"malformed header: Basic", "Basic " + base64.StdEncoding.EncodeToString([]byte("admin:admin")), nil},
		{"malformed header: empty bearer", "Bearer ", nil},
		{"malformed header: two tokens", "Bearer " + f.adminToken + " " + f.adminToken, nil},
		{"malformed header: not a token68", "Bearer abc$def", nil},
		{"oversized header", "Bearer " + strings.Repeat("a", auth.MaxAuthorizationLen+1), nil},
		{"two Authorization values", "", []string{"authorization", bearer(f.adminToken), "authorization", bearer(f.adminToken)}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := f.snapshot(t)
			q := &meridianv1.Queue{Path: "evil-" + string(rune('a'+i%26))}
			for _, transport := range []string{"grpc", "rest"} {
				rid := f.nextRequestID("badcred")
				if transport == "grpc" {
					ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
					md := tc.grpcMD
					if md == nil {
						md = []string{"authorization", tc.header}
					}
					ctx = metadata.AppendToOutgoingContext(ctx, append(md, "x-request-id", rid)...)
					err := f.conn.Invoke(ctx, qSvc+"CreateQueue", &meridianv1.CreateQueueRequest{Queue: q}, &meridianv1.Queue{})
					cancel()
					if codeOf(err) != codes.Unauthenticated {
						t.Fatalf("gRPC: %v; want Unauthenticated", err)
					}
					noSecret(t, status.Convert(err).Message(), tc.header)
				} else {
					req, _ := http.NewRequest(http.MethodPost, f.restBase+"/v1/queues", strings.NewReader(`{"path":"`+q.Path+`"}`))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("X-Request-Id", rid)
					if tc.grpcMD != nil {
						req.Header.Add("Authorization", tc.grpcMD[1])
						req.Header.Add("Authorization", tc.grpcMD[3])
					} else {
						req.Header.Set("Authorization", tc.header)
					}
					resp, err := f.http.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					b := make([]byte, 4096)
					n, _ := resp.Body.Read(b)
					resp.Body.Close()
					if resp.StatusCode != http.StatusUnauthorized {
						t.Fatalf("REST: %d %s; want 401", resp.StatusCode, b[:n])
					}
					noSecret(t, string(b[:n]), tc.header)
				}
				ev := f.waitAudit(t, rid, string(authz.ActQueueCreate), "", meridianv1.AuditResult_AUDIT_RESULT_UNAUTHENTICATED)
				if ev.GetPrincipal().GetUser() != "" || ev.GetReason() == "" {
					t.Errorf("audit event %s: principal %v, reason %q", ev.GetId(), ev.GetPrincipal(), ev.GetReason())
				}
				noSecret(t, ev.String(), tc.header)
			}
			if d := diffState(before, f.snapshot(t)); d != "" {
				t.Fatalf("a refused credential changed state: %s", d)
			}
		})
	}
	t.Run("client certificate from another CA", func(t *testing.T) {
		stranger := newTestCA(t, "someone-elses-ca")
		conn, hc := f.mtlsClients(t, stranger.clientCert(t, 7, "mallory", "platform-admins"))
		before := f.snapshot(t)
		rid := f.nextRequestID("badcert")
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		err := conn.Invoke(metadata.AppendToOutgoingContext(ctx, "x-request-id", rid), qSvc+"CreateQueue",
			&meridianv1.CreateQueueRequest{Queue: &meridianv1.Queue{Path: "evil-cert"}}, &meridianv1.Queue{})
		if codeOf(err) != codes.Unauthenticated {
			t.Fatalf("gRPC with a stranger's certificate: %v; want Unauthenticated", err)
		}
		f.waitAudit(t, rid, string(authz.ActQueueCreate), "", meridianv1.AuditResult_AUDIT_RESULT_UNAUTHENTICATED)
		rid = f.nextRequestID("badcert")
		r := f.rest(t, hc, cred{}, http.MethodPost, "/v1/queues", []byte(`{"path":"evil-cert"}`), rid)
		if r.status != http.StatusUnauthorized {
			t.Fatalf("REST with a stranger's certificate: %d %s; want 401", r.status, r.body)
		}
		f.waitAudit(t, rid, string(authz.ActQueueCreate), "", meridianv1.AuditResult_AUDIT_RESULT_UNAUTHENTICATED)
		if d := diffState(before, f.snapshot(t)); d != "" {
			t.Fatalf("state changed: %s", d)
		}
	})
	t.Run("no credentials at all", func(t *testing.T) {
		err := f.invoke(cred{}, admSvc+"WhoAmI", &meridianv1.WhoAmIRequest{}, &meridianv1.WhoAmIResponse{}, "")
		if codeOf(err) != codes.Unauthenticated || !strings.Contains(status.Convert(err).Message(), "send a bearer token") {
			t.Fatalf("%v; want Unauthenticated asking for a bearer token", err)
		}
	})
	t.Run("the JSON-lines audit file holds no credential", func(t *testing.T) {
		b, err := os.ReadFile(f.auditFile)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "AUDIT_RESULT_UNAUTHENTICATED") {
			t.Fatalf("the audit file has no UNAUTHENTICATED event")
		}
		for _, tc := range cases {
			noSecret(t, string(b), tc.header)
		}
		noSecret(t, string(b), bearer(f.adminToken))
	})
	t.Run("the hub's logs hold no credential", func(t *testing.T) {
		logs := f.logs.String()
		if !strings.Contains(logs, "wrote a new admin API token") {
			t.Fatalf("the hub's logs were not captured:\n%s", truncate(logs, 2000))
		}
		for _, tc := range cases {
			noSecret(t, logs, tc.header)
		}
		noSecret(t, logs, bearer(f.adminToken))
		noSecret(t, logs, bearer(revoked))
		noSecret(t, logs, bearer(mdAdmin))
	})
	t.Run("the metrics hold no credential", func(t *testing.T) {
		r := f.rest(t, nil, f.adminCred(), http.MethodGet, "/metrics", nil, "")
		if r.status != http.StatusOK || !strings.Contains(string(r.body), "meridian_api_requests_total") {
			t.Fatalf("GET /metrics: %d %s", r.status, truncate(string(r.body), 500))
		}
		for _, tc := range cases {
			noSecret(t, string(r.body), tc.header)
		}
		noSecret(t, string(r.body), bearer(f.adminToken))
	})
}

// noSecret fails when text holds the credential of header (its token
// part, or an 20-byte piece of a long one).
func noSecret(t *testing.T, text, header string) {
	t.Helper()
	_, tok, _ := strings.Cut(header, " ")
	if tok == "" {
		tok = header
	}
	if len(tok) < 16 {
		return
	}
	for _, part := range strings.FieldsFunc(tok, func(r rune) bool { return r == '.' || r == '_' || r == ' ' }) {
		if len(part) >= 20 && !strings.HasPrefix(part, "aaaaaaaaaaaaaaaa") && strings.Contains(text, part[:20]) {
			t.Fatalf("a credential leaked into %q", truncate(text, 300))
		}
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// TestOIDCKeyRotation: after the issuer rotates its signing key, a token
// signed with the new key is accepted once the hub refetches the keys (at
// most once per auth.DefaultKeyRefreshMinInterval), and a token signed
// with the withdrawn key that the hub never saw is refused.
func TestOIDCKeyRotation(t *testing.T) {
	f := startHub(t)
	whoami := func(tok string) error {
		return f.invoke(cred{header: bearer(tok)}, admSvc+"WhoAmI", &meridianv1.WhoAmIRequest{}, &meridianv1.WhoAmIResponse{}, "")
	}
	before := f.oidcToken(t, "rita", "a-admins")
	unused := f.oidcToken(t, "rita2") // signed with the old key, never shown to the hub
	if err := whoami(before); err != nil {
		t.Fatalf("a valid token before rotation: %v", err)
	}
	f.iss.Rotate(t, "")
	after := f.oidcToken(t, "rita", "a-admins")
	deadline := 3 * auth.DefaultKeyRefreshMinInterval
	var err error
	for start := time.Now(); time.Since(start) < deadline; time.Sleep(250 * time.Millisecond) {
		if err = whoami(after); err == nil {
			break
		}
		if codeOf(err) != codes.Unauthenticated {
			t.Fatalf("a token of the new key: %v", err)
		}
	}
	if err != nil {
		t.Fatalf("a token signed with the rotated key is still refused after %s: %v", deadline, err)
	}
	if err := whoami(unused); codeOf(err) != codes.Unauthenticated {
		t.Fatalf("a token of the withdrawn key, never seen before: %v; want Unauthenticated", err)
	}
	// Documented: a token verified before the rotation stays accepted
	// until it expires (OIDC has no revocation; short lifetimes are).
	if err := whoami(before); err != nil {
		t.Fatalf("the token verified before the rotation: %v; want it cached until it expires", err)
	}
}
