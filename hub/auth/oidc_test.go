package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/meridian-gpu/meridian/internal/testoidc"
)

// Good tokens of both algorithms map to the principal the configuration
// asks for: user name claim, groups (array or single string), prefixes.
func TestOIDCAccepts(t *testing.T) {
	for _, alg := range []jose.SignatureAlgorithm{testoidc.RS256, testoidc.ES256} {
		t.Run(string(alg), func(t *testing.T) {
			iss := testoidc.NewWithAlg(t, alg)
			f := newOIDC(t, func(o *OIDCOptions) {
				o.Issuers[0].UsernameClaim = "email"
				o.Issuers[0].UsernamePrefix = "oidc:"
				o.Issuers[0].GroupsPrefix = "oidc:"
			}, iss)
			ctx := testCtx(t)
			c := iss.Claims(aud, "u-123")
			c["email"] = "alice@example.com"
			c["email_verified"] = true
			c["groups"] = []string{"ml", "ops"}
			p, err := f.Authenticate(ctx, bearer(iss.Token(t, c, nil)))
			if err != nil {
				t.Fatalf("Authenticate: %s", AuditDetail(err))
			}
			want := &Principal{User: "oidc:alice@example.com", Groups: []string{"oidc:ml", "oidc:ops"}, Method: MethodOIDC,
				Issuer: iss.URL, Subject: "u-123", ExpiresAt: time.Unix(c["exp"].(int64), 0)}
			if !principalEqual(p, want) {
				t.Fatalf("principal = %+v, want %+v", p, want)
			}

			c = iss.Claims(aud, "u-456")
			c["aud"] = []string{"other", aud}
			c["email"] = "bob@example.com"
			c["groups"] = "solo"
			p, err = f.Authenticate(ctx, bearer(iss.Token(t, c, nil)))
			if err != nil || p.User != "oidc:bob@example.com" || !slices.Equal(p.Groups, []string{"oidc:solo"}) {
				t.Fatalf("audience list, groups string: %+v, %s", p, AuditDetail(err))
			}
		})
	}
}

func principalEqual(a, b *Principal) bool {
	return a.User == b.User && slices.Equal(a.Groups, b.Groups) && a.Method == b.Method && a.Issuer == b.Issuer &&
		a.Subject == b.Subject && a.TokenID == b.TokenID && slices.Equal(a.Roles, b.Roles) && a.ExpiresAt.Equal(b.ExpiresAt)
}

// Every bad token is refused as unauthenticated with a plain reason, and
// the error never carries the token.
func TestOIDCRejects(t *testing.T) {
	iss := testoidc.New(t)
	other := testoidc.New(t) // a second, trusted issuer
	stranger := testoidc.New(t)
	f := newOIDC(t, func(o *OIDCOptions) { o.Issuers[0].UsernameClaim = "email" }, iss, other)
	ctx := testCtx(t)
	now := time.Now()
	claims := func(edit func(map[string]any)) map[string]any {
		c := iss.Claims(aud, "alice")
		c["email"] = "alice@example.com"
		if edit != nil {
			edit(c)
		}
		return c
	}
	unpublished, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	good := iss.Token(t, claims(nil), nil)
	tampered := func() string {
		parts := strings.Split(good, ".")
		c := claims(func(c map[string]any) { c["email"] = "admin@example.com" })
		forged := strings.Split(testoidc.Unsigned(t, map[string]any{}, c, nil), ".")[1]
		return parts[0] + "." + forged + "." + parts[2]
	}()

	tests := map[string]struct {
		token  string
		reason string
	}{
		"expired":                {iss.Token(t, claims(func(c map[string]any) { c["exp"] = now.Add(-time.Minute).Unix() }), nil), "expired"},
		"no exp":                 {iss.Token(t, claims(func(c map[string]any) { delete(c, "exp") }), nil), "expired"},
		"nbf in the future":      {iss.Token(t, claims(func(c map[string]any) { c["nbf"] = now.Add(10 * time.Minute).Unix() }), nil), "invalid token"},
		"nbf beyond leeway":      {iss.Token(t, claims(func(c map[string]any) { c["nbf"] = now.Add(3 * time.Minute).Unix() }), nil), "not yet valid"},
		"iat in the future":      {iss.Token(t, claims(func(c map[string]any) { c["iat"] = now.Add(10 * time.Minute).Unix() }), nil), "not yet valid"},
		"wrong audience":         {iss.Token(t, claims(func(c map[string]any) { c["aud"] = "someone-else" }), nil), "invalid token"},
		"untrusted issuer":       {stranger.Token(t, stranger.Claims(aud, "alice"), nil), "issuer is not trusted"},
		"iss of another issuer":  {other.Token(t, claims(nil), nil), "invalid token"},
		"alg none":               {testoidc.Unsigned(t, map[string]any{"alg": "none", "typ": "JWT"}, claims(nil), nil), "invalid token"},
		"alg none with kid":      {testoidc.Unsigned(t, map[string]any{"alg": "none", "kid": iss.KeyID()}, claims(nil), []byte("x")), "invalid token"},
		"HS256 with public key":  {testoidc.HS256(t, map[string]any{"kid": iss.KeyID()}, claims(nil), iss.PublicKeyPEM(t)), "invalid token"},
		"tampered payload":       {tampered, "invalid token"},
		"unknown kid":            {testoidc.SignWith(t, testoidc.ES256, unpublished, "no-such-key", claims(nil), nil), "invalid token"},
		"published kid, bad key": {testoidc.SignWith(t, testoidc.ES256, unpublished, iss.KeyID(), claims(nil), nil), "invalid token"},
		"no kid, bad key":        {testoidc.SignWith(t, testoidc.ES256, unpublished, "", claims(nil), nil), "invalid token"},
		"signature stripped":     {good[:strings.LastIndex(good, ".")+1], "invalid token"},
		"email not verified":     {iss.Token(t, claims(func(c map[string]any) { c["email_verified"] = false }), nil), "not verified"},
		"no user name claim":     {iss.Token(t, claims(func(c map[string]any) { delete(c, "email") }), nil), "no user name"},
		"user name not a string": {iss.Token(t, claims(func(c map[string]any) { c["email"] = 42 }), nil), "no user name"},
		"groups of numbers":      {iss.Token(t, claims(func(c map[string]any) { c["groups"] = []int{1} }), nil), "invalid token"},
		"payload not base64":     {"eyJhbGciOiJSUzI1NiJ9.a+b/.abc", "malformed"},
		"payload not JSON":       {"eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte("[1]")) + ".abc", "malformed"},
		"no iss":                 {iss.Token(t, claims(func(c map[string]any) { delete(c, "iss") }), nil), "malformed"},
	}
	if _, err := f.Authenticate(ctx, bearer(good)); err != nil {
		t.Fatalf("control token refused: %s", AuditDetail(err))
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, err := f.Authenticate(ctx, bearer(tc.token))
			if err == nil {
				t.Fatalf("accepted as %+v", p)
			}
			mustUnauth(t, err, tc.reason, tc.token)
		})
	}
}

// Which credentials OIDC leaves to other methods.
func TestOIDCNotApplicable(t *testing.T) {
	f := newOIDC(t, nil, testoidc.New(t))
	for name, cr := range map[string]Credentials{
		"no header":    {},
		"API token":    bearer("mrd_aaaaaaaaaaaaaaaa_" + strings.Repeat("a", 52)),
		"opaque token": bearer("abcdef"),
		"two dots not": bearer("a.b"),
	} {
		if _, err := f.Authenticate(testCtx(t), cr); !errors.Is(err, ErrNotApplicable) {
			t.Errorf("%s: err = %v, want ErrNotApplicable", name, err)
		}
	}
}

// The issuer rotates its key in the middle: a token of the new key verifies
// (one JWKS refetch on the unknown kid, once KeyRefreshMinInterval has
// passed since the last fetch); a token of the old key
// verified before stays accepted from the cache until it expires, while a
// verifier that never saw it refuses it.
func TestOIDCKeyRotation(t *testing.T) {
	iss := testoidc.New(t)
	f := newOIDC(t, nil, iss)
	ctx := testCtx(t)
	old := iss.Token(t, iss.Claims(aud, "alice"), nil)
	if _, err := f.Authenticate(ctx, bearer(old)); err != nil {
		t.Fatal(AuditDetail(err))
	}
	iss.Rotate(t, testoidc.ES256)
	f.clock.Advance(DefaultKeyRefreshMinInterval)
	fresh := iss.Token(t, iss.Claims(aud, "bob"), nil)
	p, err := f.Authenticate(ctx, bearer(fresh))
	if err != nil || p.User != "bob" {
		t.Fatalf("token of the new key: %+v, %s", p, AuditDetail(err))
	}
	if got := iss.JWKSHits(); got != 2 {
		t.Fatalf("JWKS fetched %d times, want 2 (start, rotation)", got)
	}
	if p, err := f.Authenticate(ctx, bearer(old)); err != nil || p.User != "alice" {
		t.Fatalf("cached token of the old key: %+v, %s", p, AuditDetail(err))
	}
	g := newOIDC(t, nil, iss)
	if _, err := g.Authenticate(ctx, bearer(old)); !IsUnauthenticated(err) {
		t.Fatalf("uncached token of a removed key: err = %v", err)
	}
	// Rotating again, back to RSA, works the same way.
	iss.Rotate(t, testoidc.RS256)
	f.clock.Advance(DefaultKeyRefreshMinInterval)
	if _, err := f.Authenticate(ctx, bearer(iss.Token(t, iss.Claims(aud, "carol"), nil))); err != nil {
		t.Fatalf("second rotation: %s", AuditDetail(err))
	}
}

// N calls with one token cost one signature check; the cached result ends
// at the token's expiry; the cache holds at most CacheSize tokens.
func TestOIDCCache(t *testing.T) {
	iss := testoidc.New(t)
	f := newOIDC(t, func(o *OIDCOptions) { o.CacheSize = 3 }, iss)
	ctx := testCtx(t)
	c := iss.Claims(aud, "alice")
	c["exp"] = time.Now().Add(10 * time.Minute).Unix()
	tok := iss.Token(t, c, nil)
	const n = 200
	for i := range n {
		p, err := f.Authenticate(ctx, bearer(tok))
		if err != nil {
			t.Fatalf("call %d: %s", i, AuditDetail(err))
		}
		p.Groups = append(p.Groups, "mutated") // must not leak into the cache
	}
	if got := f.checks.Load(); got != 1 {
		t.Fatalf("%d calls made %d signature checks, want 1", n, got)
	}
	if p, _ := f.Authenticate(ctx, bearer(tok)); len(p.Groups) != 0 {
		t.Fatalf("a caller's change reached the cache: %v", p.Groups)
	}
	for i := range 5 {
		if _, err := f.Authenticate(ctx, bearer(iss.Token(t, iss.Claims(aud, "u"+string(rune('a'+i))), nil))); err != nil {
			t.Fatal(AuditDetail(err))
		}
	}
	if got := f.cache.len(); got != 3 {
		t.Fatalf("cache holds %d entries, want the bound 3", got)
	}
	f.clock.Advance(11 * time.Minute)
	_, err := f.Authenticate(ctx, bearer(tok))
	mustUnauth(t, err, "expired", tok)
}

// An unreachable issuer does not block: the first request fails with
// ErrUnavailable naming the issuer, later ones fail fast until the backoff
// passes, and the issuer is used as soon as it answers again.
func TestOIDCIssuerUnreachable(t *testing.T) {
	iss := testoidc.New(t)
	iss.SetDown(true)
	f := newOIDC(t, func(o *OIDCOptions) { o.RetryMin, o.RetryMax = time.Minute, time.Hour }, iss)
	ctx := testCtx(t)
	tok := iss.Token(t, iss.Claims(aud, "alice"), nil)
	_, err := f.Authenticate(ctx, bearer(tok))
	if !IsUnavailable(err) || IsUnauthenticated(err) || !strings.Contains(AuditDetail(err), iss.URL) {
		t.Fatalf("err = %v (%s), want unavailable naming the issuer", err, AuditDetail(err))
	}
	if err := f.Warm(ctx); !IsUnavailable(err) {
		t.Fatalf("Warm during backoff: %v", err)
	}
	hits := iss.DiscoveryHits()
	iss.SetDown(false)
	if _, err := f.Authenticate(ctx, bearer(tok)); !IsUnavailable(err) || iss.DiscoveryHits() != hits {
		t.Fatalf("within backoff: err = %v, discovery hits %d -> %d; want a fast failure", err, hits, iss.DiscoveryHits())
	}
	f.clock.Advance(2 * time.Minute)
	if err := f.Warm(ctx); err != nil {
		t.Fatalf("Warm after recovery: %v", err)
	}
	if p, err := f.Authenticate(ctx, bearer(tok)); err != nil || p.User != "alice" {
		t.Fatalf("after recovery: %+v, %s", p, AuditDetail(err))
	}
}

// An issuer that accepts connections and never answers costs at most the
// discovery timeout, or the request's own deadline if that is sooner.
func TestOIDCDiscoveryTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // accept and hold connections, never answer
		var held []net.Conn
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	url := "https://" + ln.Addr().String()
	o, err := NewOIDC(OIDCOptions{Issuers: []IssuerConfig{{IssuerURL: url, Audience: aud}}, DiscoveryTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	tok := testoidc.Unsigned(t, map[string]any{"alg": "RS256"}, map[string]any{"iss": url}, []byte("sig"))
	start := time.Now()
	_, err = o.Authenticate(testCtx(t), bearer(tok))
	if !IsUnavailable(err) || time.Since(start) > 5*time.Second {
		t.Fatalf("err = %v after %s, want unavailable within the discovery timeout", err, time.Since(start))
	}
}

// Configuration errors are caught at construction, with no network I/O;
// CAFile works like RootCAs.
func TestNewOIDCConfig(t *testing.T) {
	iss := testoidc.New(t)
	badCA := filepath.Join(t.TempDir(), "bad.pem")
	if err := os.WriteFile(badCA, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, ic := range map[string][]IssuerConfig{
		"none":            nil,
		"http":            {{IssuerURL: "http://idp.example.com", Audience: aud}},
		"no audience":     {{IssuerURL: "https://idp.example.com"}},
		"symmetric alg":   {{IssuerURL: "https://idp.example.com", Audience: aud, SigningAlgs: []string{"HS256"}}},
		"alg none":        {{IssuerURL: "https://idp.example.com", Audience: aud, SigningAlgs: []string{"none"}}},
		"twice":           {{IssuerURL: "https://idp.example.com", Audience: aud}, {IssuerURL: "https://idp.example.com", Audience: "b"}},
		"missing CA file": {{IssuerURL: "https://idp.example.com", Audience: aud, CAFile: filepath.Join(t.TempDir(), "nope.pem")}},
		"CA file not PEM": {{IssuerURL: "https://idp.example.com", Audience: aud, CAFile: badCA}},
	} {
		if _, err := NewOIDC(OIDCOptions{Issuers: ic}); err == nil {
			t.Errorf("%s: NewOIDC accepted %+v", name, ic)
		}
	}
	o, err := NewOIDC(OIDCOptions{Issuers: []IssuerConfig{{IssuerURL: iss.URL, Audience: aud, CAFile: iss.CAFile}}})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if iss.DiscoveryHits() != 0 {
		t.Fatal("NewOIDC contacted the issuer")
	}
	if _, err := o.Authenticate(testCtx(t), bearer(iss.Token(t, iss.Claims(aud, "alice"), nil))); err != nil {
		t.Fatalf("issuer trusted through CAFile: %s", AuditDetail(err))
	}
	// Without the CA the issuer's TLS is not trusted.
	o2, err := NewOIDC(OIDCOptions{Issuers: []IssuerConfig{{IssuerURL: iss.URL, Audience: aud}}})
	if err != nil {
		t.Fatal(err)
	}
	defer o2.Close()
	if _, err := o2.Authenticate(testCtx(t), bearer(iss.Token(t, iss.Claims(aud, "alice"), nil))); !IsUnavailable(err) {
		t.Fatalf("issuer with an untrusted certificate: err = %v, want unavailable", err)
	}
}

// Several issuers: each token goes to its own issuer and gets its prefix.
func TestOIDCSeveralIssuers(t *testing.T) {
	a, b := testoidc.New(t), testoidc.NewWithAlg(t, testoidc.ES256)
	f := newOIDC(t, func(o *OIDCOptions) {
		o.Issuers[0].UsernamePrefix = "a:"
		o.Issuers[1].UsernamePrefix = "b:"
	}, a, b)
	ctx := testCtx(t)
	for _, tc := range []struct {
		iss  *testoidc.Issuer
		want string
	}{{a, "a:alice"}, {b, "b:alice"}} {
		p, err := f.Authenticate(ctx, bearer(tc.iss.Token(t, tc.iss.Claims(aud, "alice"), nil)))
		if err != nil || p.User != tc.want || p.Issuer != tc.iss.URL {
			t.Fatalf("%s: %+v, %s", tc.iss.URL, p, AuditDetail(err))
		}
	}
}

// Forged tokens with made-up key ids make the hub fetch the issuer's keys
// at most once per KeyRefreshMinInterval, whatever their number; a token
// of a genuinely new key waits at most that long.
func TestOIDCKeyRefreshRateLimited(t *testing.T) {
	iss := testoidc.New(t)
	f := newOIDC(t, nil, iss)
	ctx := testCtx(t)
	if _, err := f.Authenticate(ctx, bearer(iss.Token(t, iss.Claims(aud, "alice"), nil))); err != nil {
		t.Fatal(AuditDetail(err))
	}
	forger, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		c := iss.Claims(aud, "mallory")
		tok := testoidc.SignWith(t, testoidc.ES256, forger, "kid-"+string(rune('a'+i%26)), c, nil)
		if _, err := f.Authenticate(ctx, bearer(tok)); !IsUnauthenticated(err) {
			t.Fatalf("forgery %d: err = %v", i, err)
		}
	}
	if got := iss.JWKSHits(); got != 1 {
		t.Fatalf("50 forgeries made %d JWKS fetches in one interval, want 1 (the first)", got)
	}
	iss.Rotate(t, "")
	fresh := iss.Token(t, iss.Claims(aud, "bob"), nil)
	if _, err := f.Authenticate(ctx, bearer(fresh)); !IsUnauthenticated(err) {
		t.Fatalf("new key within the interval: err = %v, want refused until the interval passes", err)
	}
	f.clock.Advance(DefaultKeyRefreshMinInterval)
	if p, err := f.Authenticate(ctx, bearer(fresh)); err != nil || p.User != "bob" {
		t.Fatalf("new key after the interval: %+v, %s", p, AuditDetail(err))
	}
	if got := iss.JWKSHits(); got != 2 {
		t.Fatalf("JWKS fetched %d times, want 2", got)
	}
}

// Many requests arriving together at a fresh hub run one discovery and
// one key fetch, and all succeed.
func TestOIDCConcurrentFirstUse(t *testing.T) {
	iss := testoidc.New(t)
	f := newOIDC(t, nil, iss)
	ctx := testCtx(t)
	toks := make([]string, 4)
	for i := range toks {
		toks[i] = iss.Token(t, iss.Claims(aud, "u"+string(rune('a'+i))), nil)
	}
	errs := make(chan error, 40)
	for i := range 40 {
		go func() {
			_, err := f.Authenticate(ctx, bearer(toks[i%len(toks)]))
			errs <- err
		}()
	}
	for range 40 {
		if err := <-errs; err != nil {
			t.Fatal(AuditDetail(err))
		}
	}
	if iss.DiscoveryHits() != 1 || iss.JWKSHits() != 1 {
		t.Fatalf("discovery %d, JWKS %d; want 1 and 1", iss.DiscoveryHits(), iss.JWKSHits())
	}
}

// A request that read the issuer's keys before the first fetch finished
// (an empty set) and asks for a refresh just after it finished must be
// verified with the fetched keys, not refused because the keys are "too
// recent to fetch again". Under load a fresh hub refused a valid token
// this way.
func TestOIDCKeysFetchedMeanwhileAreUsed(t *testing.T) {
	iss := testoidc.New(t)
	r := &remoteKeys{url: iss.URL + "/keys", client: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: iss.CAPool}}},
		base: context.Background(), algs: []jose.SignatureAlgorithm{jose.RS256, jose.ES256}, minRefresh: DefaultKeyRefreshMinInterval, now: time.Now}
	ctx := testCtx(t)
	if _, err := r.refresh(ctx); err != nil { // the first fetch, by another request
		t.Fatal(err)
	}
	jws, err := jose.ParseSigned(iss.Token(t, iss.Claims(aud, "alice"), nil), r.algs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.verify(ctx, jws, nil); err != nil { // nil: what this request read before the fetch
		t.Fatalf("a valid token refused after the first fetch: %v", err)
	}
	if got := iss.JWKSHits(); got != 1 {
		t.Fatalf("JWKS fetched %d times, want 1", got)
	}
	// A token no current key verifies is still refused, without a fetch.
	forger, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := jose.ParseSigned(testoidc.SignWith(t, testoidc.ES256, forger, iss.KeyID(), iss.Claims(aud, "mallory"), nil), r.algs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.verify(ctx, forged, nil); !errors.Is(err, errKeysRecent) {
		t.Fatalf("forged token: err = %v, want errKeysRecent", err)
	}
}
