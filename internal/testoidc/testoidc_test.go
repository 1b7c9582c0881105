package testoidc

import (
	"context"
	"crypto/tls"
	"net/http"
	"strings"
	"testing"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
)

func verifier(t *testing.T, i *Issuer) (*oidc.IDTokenVerifier, context.Context) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: i.CAPool}}}
	ctx := oidc.ClientContext(context.Background(), client)
	p, err := oidc.NewProvider(ctx, i.URL)
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	return p.Verifier(&oidc.Config{ClientID: "meridian"}), ctx
}

// Tokens of both algorithms verify with go-oidc through discovery and the
// JWKS, over TLS trusted only through the issuer's CA.
func TestTokensVerifyThroughDiscovery(t *testing.T) {
	for _, alg := range []jose.SignatureAlgorithm{RS256, ES256} {
		t.Run(string(alg), func(t *testing.T) {
			i := NewWithAlg(t, alg)
			v, ctx := verifier(t, i)
			tok, err := v.Verify(ctx, i.Token(t, i.Claims("meridian", "alice"), nil))
			if err != nil || tok.Subject != "alice" {
				t.Fatalf("Verify = %v, %v", tok, err)
			}
			if i.DiscoveryHits() != 1 || i.JWKSHits() != 1 {
				t.Fatalf("hits: discovery %d, jwks %d; want 1, 1", i.DiscoveryHits(), i.JWKSHits())
			}
		})
	}
}

// After Rotate the old key is gone from the JWKS: new tokens verify,
// old-key tokens no longer do. The check after rotation uses a fresh
// verifier: go-oidc's RemoteKeySet hands a caller that arrives just after a
// fetch completes (before the fetch clears its in-flight marker) that
// fetch's stale keys, so reusing the first verifier made this test flaky.
// The hub does not use that key set (hub/auth keeps its own, which refetches
// under its lock), and hub/auth's tests cover refetch on an unknown kid.
func TestRotate(t *testing.T) {
	i := New(t)
	v, ctx := verifier(t, i)
	old := i.Token(t, i.Claims("meridian", "alice"), nil)
	if _, err := v.Verify(ctx, old); err != nil {
		t.Fatal(err)
	}
	oldKid := i.KeyID()
	if kid := i.Rotate(t, ES256); kid == oldKid {
		t.Fatal("Rotate kept the key id")
	}
	v, ctx = verifier(t, i)
	if _, err := v.Verify(ctx, i.Token(t, i.Claims("meridian", "alice"), nil)); err != nil {
		t.Fatalf("new key after rotation: %v", err)
	}
	if _, err := v.Verify(ctx, old); err == nil {
		t.Fatal("token of the removed key still verifies")
	}
}

func TestForgeriesHaveTheirHeaders(t *testing.T) {
	i := New(t)
	none := Unsigned(t, map[string]any{"alg": "none"}, i.Claims("m", "a"), nil)
	if !strings.HasSuffix(none, ".") {
		t.Fatalf("alg none token %q should have an empty signature", none)
	}
	hs := HS256(t, map[string]any{"kid": i.KeyID()}, i.Claims("m", "a"), i.PublicKeyPEM(t))
	if len(strings.Split(hs, ".")) != 3 {
		t.Fatal("HS256 token is not three parts")
	}
	noKid := i.Token(t, i.Claims("m", "a"), map[string]any{"kid": nil})
	jws, err := jose.ParseSigned(noKid, []jose.SignatureAlgorithm{RS256})
	if err != nil || jws.Signatures[0].Header.KeyID != "" {
		t.Fatalf("token without kid: %v, kid %q", err, jws.Signatures[0].Header.KeyID)
	}
	jws, err = jose.ParseSigned(i.Token(t, i.Claims("m", "a"), nil), []jose.SignatureAlgorithm{RS256})
	if err != nil || jws.Signatures[0].Header.KeyID != i.KeyID() {
		t.Fatalf("token kid: %v, kid %q, want %q", err, jws.Signatures[0].Header.KeyID, i.KeyID())
	}
	i.SetDown(true)
	if resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: i.CAPool}}}).Get(i.URL + "/keys"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("down issuer answered %v, %v", resp, err)
	}
}
