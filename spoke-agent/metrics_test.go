package agent_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// sample is one series' value in a registry, and whether it exists.
func sample(t testing.TB, reg prometheus.Gatherer, name, label, value string) (float64, bool) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					if m.GetCounter() != nil {
						return m.GetCounter().GetValue(), true
					}
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// seriesCount is how many series of name reg exports.
func seriesCount(t testing.TB, reg prometheus.Gatherer, name string) int {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}

// Launch faults count as connector errors; a rejection (the cluster's
// answer) and a cancel of unknown work do not.
func TestConnectorErrorsCounted(t *testing.T) {
	e := newEnv(t, func(e *env) {
		e.wrap = func(c agent.Connector) agent.Connector { return &faultyLaunch{Connector: c, fails: 2} }
	})
	reg := e.agent.Metrics().Registry()
	for _, op := range []string{"inventory", "launch", "cancel", "list"} {
		if v, ok := sample(t, reg, "meridian_agent_connector_errors_total", "operation", op); !ok || v != 0 {
			t.Fatalf("connector errors{%s} = %v (exported %v) at start, want a 0 series", op, v, ok)
		}
	}
	e.publish("retry", dispatchMsg("retry", 1, nil))
	e.waitFor("running after retries", e.hasEvent("retry", running))
	e.publish("big", dispatchMsg("big", 8, nil))
	e.waitFor("rejected", e.hasEvent("big", rejected))
	e.publish("cancel-nothing", cancelMsg("nothing-here", false))
	time.Sleep(200 * time.Millisecond)
	if v, _ := sample(t, reg, "meridian_agent_connector_errors_total", "operation", "launch"); v != 2 {
		t.Fatalf("connector errors{launch} = %v, want the 2 faults", v)
	}
	for _, op := range []string{"inventory", "cancel", "list"} {
		if v, _ := sample(t, reg, "meridian_agent_connector_errors_total", "operation", op); v != 0 {
			t.Fatalf("connector errors{%s} = %v, want 0", op, v)
		}
	}
}

func writeCreds(t *testing.T, dir string, exp int64) string {
	t.Helper()
	claims := `{"sub":"UABC","nats":{"type":"user"}}`
	if exp > 0 {
		claims = fmt.Sprintf(`{"sub":"UABC","exp":%d,"nats":{"type":"user"}}`, exp)
	}
	jwt := base64.RawURLEncoding.EncodeToString([]byte(`{"typ":"JWT","alg":"ed25519-nkey"}`)) + "." +
		base64.RawURLEncoding.EncodeToString([]byte(claims)) + ".c2ln"
	p := filepath.Join(dir, "agent.creds")
	body := "-----BEGIN NATS USER JWT-----\n" + jwt + "\n------END NATS USER JWT------\n\n" +
		"-----BEGIN USER NKEY SEED-----\nSUAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n------END USER NKEY SEED------\n"
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeCert(t *testing.T, dir string, notAfter time.Time) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "east"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "agent.crt")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The agent exports when its NATS user JWT and client certificate
// expire, reads the files again at each scrape (a rotation shows), and
// exports nothing for a credential it cannot read or that never expires.
func TestCredentialExpiryMetric(t *testing.T) {
	dir := t.TempDir()
	m := agent.NewMetrics(nil)
	reg := m.Registry()
	if n := seriesCount(t, reg, "meridian_agent_credential_expiry_timestamp_seconds"); n != 0 {
		t.Fatalf("%d credential series before any file is watched", n)
	}
	jwtExp := time.Now().Add(48 * time.Hour).Unix()
	certExp := time.Now().Add(90 * 24 * time.Hour).Truncate(time.Second)
	creds, cert := writeCreds(t, dir, jwtExp), writeCert(t, dir, certExp)
	m.WatchCredentialFiles(creds, cert)
	if v, ok := sample(t, reg, "meridian_agent_credential_expiry_timestamp_seconds", "credential", "nats_user_jwt"); !ok || v != float64(jwtExp) {
		t.Fatalf("JWT expiry = %v (exported %v), want %d", v, ok, jwtExp)
	}
	if v, ok := sample(t, reg, "meridian_agent_credential_expiry_timestamp_seconds", "credential", "nats_client_cert"); !ok || v != float64(certExp.Unix()) {
		t.Fatalf("certificate expiry = %v (exported %v), want %d", v, ok, certExp.Unix())
	}
	rotated := time.Now().Add(30 * 24 * time.Hour).Unix()
	writeCreds(t, dir, rotated)
	if v, _ := sample(t, reg, "meridian_agent_credential_expiry_timestamp_seconds", "credential", "nats_user_jwt"); v != float64(rotated) {
		t.Fatalf("JWT expiry after rotation = %v, want %d", v, rotated)
	}
	writeCreds(t, dir, 0) // no exp claim: never expires
	if err := os.Remove(cert); err != nil {
		t.Fatal(err)
	}
	if n := seriesCount(t, reg, "meridian_agent_credential_expiry_timestamp_seconds"); n != 0 {
		t.Fatalf("%d credential series for a JWT without expiry and a missing certificate, want 0", n)
	}
	m.WatchCredentialFiles("", writeCert(t, dir, certExp)) // a second call replaces the first
	if n := seriesCount(t, reg, "meridian_agent_credential_expiry_timestamp_seconds"); n != 1 {
		t.Fatalf("%d credential series after watching only a certificate, want 1", n)
	}
}
