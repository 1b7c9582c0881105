package vaultsecrets_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/vault/api"
	"github.com/nats-io/jwt/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-gpu/meridian/internal/vaultlocal"
	"github.com/meridian-gpu/meridian/internal/vaultsecrets"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// newTokenManager logs in to srv with its root token read from a file
// (auth token, the development method).
func newTokenManager(t testing.TB, addr string, opts ...vaultsecrets.Option) *vaultsecrets.Manager {
	t.Helper()
	m, err := vaultsecrets.New(ctxFor(t, 30*time.Second), vaultsecrets.Config{
		Addr: addr, Auth: vaultsecrets.AuthToken, TokenFile: writeFile(t, "token", vaultlocal.RootToken+"\n"),
		Backoff: vaultsecrets.Backoff{Base: 100 * time.Millisecond, Max: time.Second},
	}, append([]vaultsecrets.Option{vaultsecrets.WithLogger(testLogger())}, opts...)...)
	must(t, err)
	return m
}

// TestVaultKVNATSCredentials: the agent's NATS credentials come from KV
// v2 and authenticate against a real operator-mode NATS server; a new
// version written to Vault is what the next connection presents.
func TestVaultKVNATSCredentials(t *testing.T) {
	srv := vaultlocal.Start(t)
	root := rootClient(t, srv)
	ctx := ctxFor(t, time.Minute)
	op := newNATSOperator(t)
	ns := startNATS(t, op.sec)

	creds1, user1 := op.creds(t, "east-1", time.Now().Add(time.Hour))
	_, err := root.KVv2("secret").Put(ctx, "meridian/clusters/east/nats", map[string]any{"creds": creds1})
	must(t, err)

	m := newTokenManager(t, srv.Addr)
	kv := m.NewKVSecret("nats-creds", "secret", "meridian/clusters/east/nats", time.Hour).WithExpiry(vaultsecrets.NATSCredsExpiry("creds"))
	must(t, kv.Fetch(ctx))
	served := &servedUsers{}
	bus, err := natsbus.Connect(ctx, ns.ClientURL(), natsbus.WithCredsFunc(served.wrap(t, kv.BytesFunc("creds"))), natsbus.WithReconnectWait(20*time.Millisecond))
	must(t, err)
	defer bus.Close()
	must(t, bus.EnsureStreams(ctx))
	if _, err := bus.PublishEvent(ctx, "east", "ev-1", []byte(`{}`)); err != nil {
		t.Fatalf("publish with creds from Vault: %v", err)
	}
	if got := served.user(); got != user1 {
		t.Fatalf("connected as %s, want %s", got, user1)
	}

	// Rotate in Vault: the next connection uses the new user.
	creds2, user2 := op.creds(t, "east-2", time.Now().Add(2*time.Hour))
	_, err = root.KVv2("secret").Put(ctx, "meridian/clusters/east/nats", map[string]any{"creds": creds2})
	must(t, err)
	must(t, kv.Fetch(ctx))
	if kv.Version() != 2 {
		t.Fatalf("version %d, want 2", kv.Version())
	}
	must(t, bus.Conn().ForceReconnect())
	deadline := time.Now().Add(10 * time.Second)
	for served.user() != user2 || !bus.Conn().IsConnected() {
		if time.Now().After(deadline) {
			t.Fatalf("still connected as %s after the rotation, want %s", served.user(), user2)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := bus.PublishEvent(ctx, "east", "ev-2", []byte(`{}`)); err != nil {
		t.Fatalf("publish after the rotation: %v", err)
	}
	ready, detail := m.Readiness()
	if !ready || !strings.Contains(detail, "nats-creds valid until") {
		t.Fatalf("readiness %v %q", ready, detail)
	}
	for _, s := range []string{creds2, strings.Split(creds2, "\n")[1]} {
		if strings.Contains(detail, s) {
			t.Fatal("readiness detail carries the credentials")
		}
	}

	// A missing secret is an error naming its path.
	missing := m.NewKVSecret("x", "secret", "meridian/clusters/nowhere", 0)
	if err := missing.Fetch(ctx); err == nil || !strings.Contains(err.Error(), "secret/meridian/clusters/nowhere") {
		t.Fatalf("missing secret: %v", err)
	}
}

// servedUsers wraps a creds func and records the user (public nkey) of
// every JWT it serves to the NATS client.
type servedUsers struct {
	mu   sync.Mutex
	last string
}

func (s *servedUsers) wrap(t testing.TB, get func() ([]byte, error)) func() ([]byte, error) {
	return func() ([]byte, error) {
		b, err := get()
		if err == nil {
			if tok, err := jwt.ParseDecoratedJWT(b); err == nil {
				if uc, err := jwt.DecodeUserClaims(tok); err == nil {
					s.mu.Lock()
					s.last = uc.Subject
					s.mu.Unlock()
				}
			}
		}
		return b, err
	}
}

func (s *servedUsers) user() string { s.mu.Lock(); defer s.mu.Unlock(); return s.last }

// TestVaultAppRoleLogin: an agent on a Slurm login node logs in with
// AppRole (role id and secret id from files) and reads only what its
// policy allows; a wrong secret id is an error naming the flag.
func TestVaultAppRoleLogin(t *testing.T) {
	srv := vaultlocal.Start(t)
	root := rootClient(t, srv)
	ctx := ctxFor(t, time.Minute)
	roleFile, secretFile := setupAppRole(t, root, "role-east", "secret-east", time.Hour, 24*time.Hour)
	_, err := root.KVv2("secret").Put(ctx, "meridian/clusters/east/nats", map[string]any{"creds": "x"})
	must(t, err)
	_, err = root.KVv2("secret").Put(ctx, "meridian/clusters/west/nats", map[string]any{"creds": "y"})
	must(t, err)

	reg := prometheus.NewRegistry()
	m, err := vaultsecrets.New(ctx, vaultsecrets.Config{Addr: srv.Addr, Auth: vaultsecrets.AuthAppRole,
		RoleIDFile: roleFile, SecretIDFile: secretFile}, vaultsecrets.WithLogger(testLogger()), vaultsecrets.WithRegisterer(reg))
	must(t, err)
	if m.Logins() != 1 || metricValue(t, reg, "meridian_vault_up") != 1 {
		t.Fatalf("logins %d, up %v", m.Logins(), m.Up())
	}
	must(t, m.NewKVSecret("nats-creds", "secret", "meridian/clusters/east/nats", 0).Fetch(ctx))
	if err := m.NewKVSecret("other", "secret", "meridian/clusters/west/nats", 0).Fetch(ctx); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("another cluster's secret: want permission denied, got %v", err)
	}

	_, err = vaultsecrets.New(ctx, vaultsecrets.Config{Addr: srv.Addr, Auth: vaultsecrets.AuthAppRole,
		RoleIDFile: roleFile, SecretIDFile: writeFile(t, "wrong", "guess\n")})
	if err == nil || !strings.Contains(err.Error(), "--vault-auth approle") || strings.Contains(err.Error(), "guess") {
		t.Fatalf("wrong secret id: %v", err)
	}
	_, err = vaultsecrets.New(ctx, vaultsecrets.Config{Addr: srv.Addr, Auth: vaultsecrets.AuthAppRole,
		RoleIDFile: roleFile + ".missing", SecretIDFile: secretFile})
	if err == nil || !strings.Contains(err.Error(), "--vault-approle-role-id-file") {
		t.Fatalf("missing role id file: %v", err)
	}
}

// TestVaultTokenExpiryRelogin: the AppRole token lives 2s, renewable up
// to 4s; the LifetimeWatcher renews it, and when it reaches its max TTL
// the manager logs in again, so reads keep working for longer than any
// one token lives.
func TestVaultTokenExpiryRelogin(t *testing.T) {
	srv := vaultlocal.Start(t)
	root := rootClient(t, srv)
	ctx := ctxFor(t, time.Minute)
	roleFile, secretFile := setupAppRole(t, root, "role-east", "secret-east", 2*time.Second, 4*time.Second)
	_, err := root.KVv2("secret").Put(ctx, "meridian/clusters/east/nats", map[string]any{"creds": "x"})
	must(t, err)
	m, err := vaultsecrets.New(ctx, vaultsecrets.Config{Addr: srv.Addr, Auth: vaultsecrets.AuthAppRole,
		RoleIDFile: roleFile, SecretIDFile: secretFile, Backoff: vaultsecrets.Backoff{Base: 100 * time.Millisecond, Max: time.Second}},
		vaultsecrets.WithLogger(testLogger()))
	must(t, err)
	first := m.Client().Token()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go m.Run(rctx)
	kv := m.NewKVSecret("nats-creds", "secret", "meridian/clusters/east/nats", 0)
	deadline := time.Now().Add(30 * time.Second)
	for m.Logins() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d logins in 30s with a 4s max TTL, want 3", m.Logins())
		}
		if err := kv.Fetch(ctx); err != nil {
			t.Fatalf("read while the token is renewed and replaced: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if m.Client().Token() == first {
		t.Fatal("the token did not change across logins")
	}
	must(t, kv.Fetch(ctx))
	// The first token is dead: the renewal did not outlive its max TTL.
	if _, err := root.Auth().Token().Lookup(first); err == nil {
		t.Fatal("the first token is still alive after its max TTL")
	}
}

// TestVaultTokenAuthFileReread: with auth token, a new login re-reads the
// token file (a sidecar or operator replaces it).
func TestVaultTokenAuthFileReread(t *testing.T) {
	srv := vaultlocal.Start(t)
	root := rootClient(t, srv)
	ctx := ctxFor(t, time.Minute)
	mk := func(ttl string) string {
		s, err := root.Auth().Token().CreateWithContext(ctx, &api.TokenCreateRequest{TTL: ttl, ExplicitMaxTTL: ttl})
		must(t, err)
		return s.Auth.ClientToken
	}
	tokFile := writeFile(t, "token", mk("2s")+"\n")
	m, err := vaultsecrets.New(ctx, vaultsecrets.Config{Addr: srv.Addr, Auth: vaultsecrets.AuthToken, TokenFile: tokFile,
		Backoff: vaultsecrets.Backoff{Base: 100 * time.Millisecond, Max: 500 * time.Millisecond}}, vaultsecrets.WithLogger(testLogger()))
	must(t, err)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go m.Run(rctx)
	second := mk("1h")
	must(t, os.WriteFile(tokFile, []byte(second+"\n"), 0o600))
	deadline := time.Now().Add(20 * time.Second)
	for m.Client().Token() != second {
		if time.Now().After(deadline) {
			t.Fatalf("still on the first token after it expired (%d logins)", m.Logins())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// metricValue is the value of the first series of a gauge or counter.
func metricValue(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	must(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			m := mf.GetMetric()[0]
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// metricSum sums a counter's series.
func metricSum(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	must(t, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// issuedBy reports whether c's leaf chains to the CA PEM.
func issuedBy(t testing.TB, c *tls.Certificate, caPEM string) bool {
	t.Helper()
	_, err := c.Leaf.Verify(x509.VerifyOptions{Roots: certPool(t, caPEM), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err == nil
}
