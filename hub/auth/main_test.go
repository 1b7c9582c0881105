package auth

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	embedetcd "github.com/meridian-gpu/meridian/internal/embedded/etcd"
	"github.com/meridian-gpu/meridian/internal/testoidc"
)

// The embedded etcd starts only if a test needs it.
var (
	etcdOnce sync.Once
	etcdSrv  *embedetcd.Server
	etcdStop func()
	etcdErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if etcdStop != nil {
		etcdStop()
	}
	os.Exit(code)
}

func etcdServer(t testing.TB) *embedetcd.Server {
	t.Helper()
	etcdOnce.Do(func() { etcdSrv, etcdStop, etcdErr = embedetcd.StartTemp("auth-etcd-") })
	if etcdErr != nil {
		t.Fatalf("start embedded etcd: %v", etcdErr)
	}
	return etcdSrv
}

const aud = "meridian"

// clock is a settable clock for tests.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}

func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// countingKeySet counts signature verifications.
type countingKeySet struct {
	inner oidc.KeySet
	n     *atomic.Int64
}

func (c countingKeySet) VerifySignature(ctx context.Context, jwt string) ([]byte, error) {
	c.n.Add(1)
	return c.inner.VerifySignature(ctx, jwt)
}

// oidcFixture is an OIDC method over test issuers, counting signature checks.
type oidcFixture struct {
	*OIDC
	clock  *clock
	checks *atomic.Int64
}

func newOIDC(t testing.TB, mutate func(*OIDCOptions), issuers ...*testoidc.Issuer) *oidcFixture {
	t.Helper()
	f := &oidcFixture{clock: newClock(), checks: new(atomic.Int64)}
	opts := OIDCOptions{
		Now:              f.clock.Now,
		DiscoveryTimeout: 2 * time.Second,
		wrapKeySet:       func(ks oidc.KeySet) oidc.KeySet { return countingKeySet{inner: ks, n: f.checks} },
	}
	for _, is := range issuers {
		opts.Issuers = append(opts.Issuers, IssuerConfig{IssuerURL: is.URL, Audience: aud, RootCAs: is.CAPool})
	}
	if mutate != nil {
		mutate(&opts)
	}
	o, err := NewOIDC(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Close)
	f.OIDC = o
	return f
}

func bearer(tok string) Credentials { return Credentials{Authorization: "Bearer " + tok} }

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mustUnauth fails unless err is an unauthenticated *Error whose client
// reason contains want and whose texts never contain secret.
func mustUnauth(t testing.TB, err error, want, secret string) {
	t.Helper()
	if !IsUnauthenticated(err) || IsUnavailable(err) {
		t.Fatalf("err = %v (%s), want unauthenticated", err, AuditDetail(err))
	}
	if !containsFold(ClientReason(err), want) {
		t.Fatalf("client reason %q does not say %q (audit: %s)", ClientReason(err), want, AuditDetail(err))
	}
	noSecret(t, err, secret)
}

func noSecret(t testing.TB, err error, secret string) {
	t.Helper()
	if secret == "" {
		return
	}
	for _, s := range []string{err.Error(), ClientReason(err), AuditDetail(err), fmt.Sprintf("%+v %#v", err, err)} {
		if len(secret) >= 8 && containsFold(s, secret) {
			t.Fatalf("error text leaks the credential: %s", s)
		}
	}
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}
