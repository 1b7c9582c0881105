package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/vault/api"

	"github.com/meridian-gpu/meridian/internal/vaultlocal"
)

// TestVaultHubServingCertificate: the hub's API serving certificate comes
// from Vault PKI (token auth here) and is renewed at 2/3 of its 6s life;
// the API serves the renewed certificate without a restart. A PKI role
// Vault does not have stops the start with an error naming the setting.
func TestVaultHubServingCertificate(t *testing.T) {
	for _, k := range []string{"MERIDIAN_ETCD_ENDPOINTS", "MERIDIAN_NATS_URL", "MERIDIAN_GRPC_ADDR", "MERIDIAN_HTTP_ADDR",
		"MERIDIAN_TLS_CERT", "MERIDIAN_TLS_KEY", "MERIDIAN_VAULT_ADDR", "MERIDIAN_VAULT_TOKEN_FILE", "MERIDIAN_VAULT_CA_FILE"} {
		t.Setenv(k, "")
	}
	srv := vaultlocal.Start(t)
	root, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	if err := root.Sys().Mount("pki", &api.MountInput{Type: "pki", Config: api.MountConfigInput{MaxLeaseTTL: "87600h"}}); err != nil {
		t.Fatal(err)
	}
	ca, err := root.Logical().Write("pki/root/generate/internal", map[string]any{"common_name": "meridian-root", "ttl": "87600h", "key_type": "ec", "key_bits": 256})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.Logical().Write("pki/roles/meridian-hub", map[string]any{"allowed_domains": "hub.meridian,localhost", "allow_bare_domains": true,
		"allow_ip_sans": true, "key_type": "ec", "key_bits": 256, "max_ttl": "1h", "server_flag": true, "client_flag": false}); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(ca.Data["certificate"].(string)))
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(vaultlocal.RootToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := func(role string) []string {
		return []string{"--data-dir", filepath.Join(dir, "data-"+role), "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
			"--embedded-nats-port", "0", "--addr-file", filepath.Join(dir, "addrs.json"), "--log-level", "error", "--auth", "none",
			"--vault-addr", srv.Addr, "--vault-auth", "token", "--vault-token-file", tokenFile,
			"--vault-pki-role", role, "--vault-pki-common-name", "hub.meridian", "--vault-pki-ip-sans", "127.0.0.1", "--vault-pki-ttl", "6s"}
	}

	err = run(context.Background(), args("no-such-role"), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "vault.pkiRole (--vault-pki-role)") {
		t.Fatalf("unknown PKI role: run = %v, want an error naming vault.pkiRole", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, args("meridian-hub"), io.Discard, io.Discard) }()
	var info addrInfo
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "addrs.json")); err == nil && json.Unmarshal(b, &info) == nil && info.HTTP != "" {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("run returned early: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no address file after 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, DisableKeepAlives: true}}
	served := func() (string, bool) {
		resp, err := hc.Get("https://" + info.HTTP + "/healthz")
		if err != nil {
			return err.Error(), false
		}
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0].SerialNumber.String(), true
	}
	var first string
	for {
		s, ok := served()
		if ok {
			first = s
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API does not serve a certificate of the Vault CA: %s", s)
		}
		time.Sleep(100 * time.Millisecond)
	}
	get := func(path string) (int, string) {
		resp, err := hc.Get("https://" + info.HTTP + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for {
		code, body := get("/readyz")
		if code == http.StatusOK {
			if !strings.Contains(body, "vault: ok") || !strings.Contains(body, "api-serving-cert valid until") {
				t.Errorf("/readyz does not report Vault: %q", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %d %s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, body := get("/metrics"); !strings.Contains(body, "meridian_vault_up 1") {
		// --auth none: metrics are open to the local caller
		t.Errorf("/metrics lacks meridian_vault_up 1")
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		s, ok := served()
		if ok && s != first {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still serving serial %s after 20s with a 6s certificate (%s)", first, s)
		}
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not stop")
	}
}
