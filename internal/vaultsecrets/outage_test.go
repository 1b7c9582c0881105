package vaultsecrets_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-gpu/meridian/internal/vaultlocal"
	"github.com/meridian-gpu/meridian/internal/vaultsecrets"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// TestVaultOutageKeepsSecrets: Vault is stopped for a while
// (MERIDIAN_VAULT_TEST_OUTAGE, default 15s; set 1m for the full minute
// of the issue) and a new one is started behind the same address. While
// it is down the agent keeps its NATS credentials and its certificate
// (whose renewal falls inside the outage), says so in meridian_vault_up,
// meridian_vault_errors_total, a warning log line and the readiness
// detail, stays ready, and never gives up. Once Vault answers again it
// logs in anew (the new server does not know the old token), and gets the
// new credentials and a certificate from the new CA.
func TestVaultOutageKeepsSecrets(t *testing.T) {
	outage := envDuration(t, "MERIDIAN_VAULT_TEST_OUTAGE", 15*time.Second)
	srv := vaultlocal.Start(t)
	root := rootClient(t, srv)
	setupPKI(t, root)
	roleFile, secretFile := setupAppRole(t, root, "role-east", "secret-east", time.Hour, 24*time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), outage+3*time.Minute)
	defer cancel()
	_, err := root.KVv2("secret").Put(ctx, "meridian/clusters/east/nats", map[string]any{"creds": "creds-v1"})
	must(t, err)
	px := newProxy(t, srv.Addr)

	logs := &lockedBuffer{}
	reg := prometheus.NewRegistry()
	m, err := vaultsecrets.New(ctx, vaultsecrets.Config{Addr: px.addr(), Auth: vaultsecrets.AuthAppRole, RoleIDFile: roleFile, SecretIDFile: secretFile,
		RequestTimeout: 2 * time.Second, Backoff: vaultsecrets.Backoff{Base: 100 * time.Millisecond, Max: time.Second}},
		vaultsecrets.WithLogger(slog.New(slog.NewTextHandler(logs, nil))), vaultsecrets.WithRegisterer(reg))
	must(t, err)
	go m.Run(ctx)
	kv := m.NewKVSecret("nats-creds", "secret", "meridian/clusters/east/nats", 300*time.Millisecond)
	must(t, kv.Fetch(ctx))
	go kv.Run(ctx)
	// The certificate's renewal (at 2/3 of its life) falls inside the
	// outage; it expires a little after.
	src, err := m.NewCertSource(vaultsecrets.PKIConfig{Name: "nats-client-cert", Mount: "pki", Role: "meridian-agent",
		CommonName: "east.agents.meridian", TTL: outage * 7 / 5})
	must(t, err)
	must(t, src.Fetch(ctx))
	first := src.Certificate()
	go src.Run(ctx)

	// Stop Vault.
	px.setBackend("")
	must(t, srv.Stop())
	stopped := time.Now()
	waitFor(t, 10*time.Second, "meridian_vault_up 0", func() bool { return metricValue(t, reg, "meridian_vault_up") == 0 })
	for time.Since(stopped) < outage {
		if got, err := kv.String("creds"); err != nil || got != "creds-v1" {
			t.Fatalf("during the outage the credentials are %q, %v; want the held creds-v1", got, err)
		}
		if src.Certificate() != first {
			t.Fatal("the certificate changed while Vault was down")
		}
		ready, detail := m.Readiness()
		if !ready || !strings.Contains(detail, "vault: unreachable") || !strings.Contains(detail, "nats-client-cert valid until") {
			t.Fatalf("during the outage: ready %v, detail %q", ready, detail)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "keeping the current secrets") {
		t.Error("no warning log line while Vault was down")
	}
	for _, op := range []string{"kv", "pki"} {
		if got := counterOf(t, reg, "meridian_vault_errors_total", op); got == 0 {
			t.Errorf("meridian_vault_errors_total{operation=%q} = 0 after a %s outage", op, outage)
		}
	}

	// Start a new Vault behind the same address: same AppRole ids, new
	// credentials, a new CA.
	srv2 := vaultlocal.Start(t)
	root2 := rootClient(t, srv2)
	ca2 := setupPKI(t, root2)
	setupAppRole(t, root2, "role-east", "secret-east", time.Hour, 24*time.Hour)
	_, err = root2.KVv2("secret").Put(ctx, "meridian/clusters/east/nats", map[string]any{"creds": "creds-v2"})
	must(t, err)
	px.setBackend(srv2.Addr)
	t.Logf("Vault down for %s", time.Since(stopped).Round(time.Second))

	waitFor(t, 30*time.Second, "the new credentials", func() bool { s, _ := kv.String("creds"); return s == "creds-v2" })
	waitFor(t, 30*time.Second, "a certificate of the new CA", func() bool { return issuedBy(t, src.Certificate(), ca2) })
	if m.Logins() < 2 {
		t.Errorf("%d logins; want a new one on the new server", m.Logins())
	}
	waitFor(t, 10*time.Second, "meridian_vault_up 1", func() bool { return metricValue(t, reg, "meridian_vault_up") == 1 })
	ready, detail := m.Readiness()
	if !ready || !strings.HasPrefix(detail, "vault: ok") {
		t.Fatalf("after the outage: ready %v, detail %q", ready, detail)
	}
	if strings.Contains(logs.String(), "secret-east") || strings.Contains(logs.String(), "creds-v") {
		t.Error("a secret appears in the log")
	}
}

func waitFor(t testing.TB, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %s", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func counterOf(t testing.TB, reg *prometheus.Registry, name, op string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	must(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "operation" && l.GetValue() == op {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
