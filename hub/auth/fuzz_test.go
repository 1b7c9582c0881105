package auth

import (
	"crypto/x509"
	"strings"
	"testing"

	"github.com/meridian-gpu/meridian/internal/testoidc"
)

// FuzzParseCredentials feeds arbitrary Authorization values through header
// parsing, API token parsing, JWT issuer routing and the whole chain (OIDC
// against a real issuer, API tokens, certificates). It must never panic,
// never accept what it should not, and never put the credential in an
// error.
func FuzzParseCredentials(f *testing.F) {
	iss := testoidc.New(f)
	o := newOIDC(f, nil, iss)
	tk := newTokens(f, nil, nil)
	chain := NewChain(o, tk, NewCerts(CertOptions{}))
	good := iss.Token(f, iss.Claims(aud, "alice"), nil)
	api := tk.issue(f, IssueRequest{Name: "fuzz"}).Reveal()
	for _, s := range []string{
		"", "Bearer", "Bearer ", "bearer x", "Basic YWxhZGRpbjpvcGVuc2VzYW1l", "Bearer " + good, "Bearer " + api,
		"Bearer " + good[:len(good)-3], "Bearer " + api[:len(api)-1] + "2", "Bearer mrd_", "Bearer mrd__",
		"Bearer a.b.c", "Bearer e30.e30.e30", "Bearer eyJhbGciOiJub25lIn0.eyJpc3MiOiIifQ.",
		"Bearer " + testoidc.Unsigned(f, map[string]any{"alg": "none"}, iss.Claims(aud, "x"), nil),
		"Bearer " + testoidc.HS256(f, nil, iss.Claims(aud, "x"), iss.PublicKeyPEM(f)),
		"Bearer \xff", "Bearer a\x00b", strings.Repeat("B", MaxAuthorizationLen+1), "Bearer ==", "Bearer a==",
	} {
		f.Add(s)
	}
	ctx := testCtx(f)
	f.Fuzz(func(t *testing.T, header string) {
		tok, err := ParseAuthorization(header)
		if err == nil {
			if !isToken68(tok) || len(header) > MaxAuthorizationLen || !strings.HasSuffix(header, tok) {
				t.Fatalf("ParseAuthorization(%q) accepted %q", header, tok)
			}
		} else if !IsUnauthenticated(err) {
			t.Fatalf("ParseAuthorization error %v is not unauthenticated", err)
		}
		if id, sec, ok := parseAPIToken(tok); ok && TokenPrefix+id+"_"+sec != tok {
			t.Fatalf("parseAPIToken(%q) = %q, %q", tok, id, sec)
		}
		_, _ = unverifiedIssuer(tok)
		_ = Credentials{Authorization: header}.String()

		cr := Credentials{Authorization: header, VerifiedChains: [][]*x509.Certificate{}}
		p, err := chain.Authenticate(ctx, cr)
		switch {
		case err == nil:
			if tok != good && tok != api {
				t.Fatalf("accepted %q as %+v", header, p)
			}
		case !IsUnauthenticated(err) && !IsUnavailable(err):
			t.Fatalf("error %v is neither unauthenticated nor unavailable", err)
		case len(tok) >= 16:
			for _, s := range []string{err.Error(), ClientReason(err), AuditDetail(err)} {
				if strings.Contains(s, tok) {
					t.Fatalf("error leaks the token: %s", s)
				}
			}
		}
	})
}
