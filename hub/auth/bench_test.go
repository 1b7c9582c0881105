package auth

import (
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/meridian-gpu/meridian/internal/testoidc"
)

// A busy client: the same ID token on every call, served from the cache
// (one SHA-256 of the token and a map look-up).
func BenchmarkAuthenticateOIDCCached(b *testing.B) {
	iss := testoidc.New(b)
	f := newOIDC(b, nil, iss)
	ctx := testCtx(b)
	cr := bearer(iss.Token(b, iss.Claims(aud, "alice"), nil))
	if _, err := f.Authenticate(ctx, cr); err != nil {
		b.Fatal(AuditDetail(err))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := f.Authenticate(ctx, cr); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if n := f.checks.Load(); n != 1 {
		b.Fatalf("%d signature checks, want 1", n)
	}
}

// Every call a full verification: parse, signature, claims. Two tokens
// alternate through a cache of one entry, so each call misses.
func BenchmarkAuthenticateOIDCUncached(b *testing.B) {
	for _, alg := range []jose.SignatureAlgorithm{testoidc.RS256, testoidc.ES256} {
		b.Run(string(alg), func(b *testing.B) {
			iss := testoidc.NewWithAlg(b, alg)
			f := newOIDC(b, func(o *OIDCOptions) { o.CacheSize = 1 }, iss)
			ctx := testCtx(b)
			crs := []Credentials{bearer(iss.Token(b, iss.Claims(aud, "alice"), nil)), bearer(iss.Token(b, iss.Claims(aud, "bob"), nil))}
			if _, err := f.Authenticate(ctx, crs[0]); err != nil {
				b.Fatal(AuditDetail(err))
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				if _, err := f.Authenticate(ctx, crs[i%2]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// An API token with its record cached: parse, SHA-256, constant-time
// compare, principal copy.
func BenchmarkAuthenticateAPIToken(b *testing.B) {
	f := newTokens(b, nil, func(o *TokensOptions) { o.CacheTTL = time.Hour })
	ctx := testCtx(b)
	cr := bearer(f.issue(b, IssueRequest{Name: "bench", User: "ci", Roles: []string{"submit"}}).Reveal())
	if _, err := f.Authenticate(ctx, cr); err != nil {
		b.Fatal(AuditDetail(err))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.Authenticate(ctx, cr); err != nil {
			b.Fatal(err)
		}
	}
}

// The same through a Chain of all methods, from many goroutines.
func BenchmarkChainParallel(b *testing.B) {
	iss := testoidc.New(b)
	o := newOIDC(b, nil, iss)
	tk := newTokens(b, nil, func(opts *TokensOptions) { opts.CacheTTL = time.Hour })
	chain := NewChain(o, tk, NewCerts(CertOptions{}))
	ctx := testCtx(b)
	crs := []Credentials{bearer(iss.Token(b, iss.Claims(aud, "alice"), nil)), bearer(tk.issue(b, IssueRequest{Name: "x"}).Reveal())}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			if _, err := chain.Authenticate(ctx, crs[i%2]); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
