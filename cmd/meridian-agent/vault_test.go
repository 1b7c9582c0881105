package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/vault/api"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	embednats "github.com/meridian-gpu/meridian/internal/embedded/nats"
	"github.com/meridian-gpu/meridian/internal/vaultlocal"
)

// vaultWrite writes path with the root client or fails t.
func vaultWrite(t *testing.T, c *api.Client, path string, data map[string]any) *api.Secret {
	t.Helper()
	s, err := c.Logical().Write(path, data)
	if err != nil {
		t.Fatalf("vault write %s: %v", path, err)
	}
	return s
}

// TestVaultAgentSecrets runs meridian-agent with its NATS credentials
// from Vault KV v2 and its NATS client certificate from Vault PKI (AppRole
// login, as on a Slurm login node) against a real NATS server that wants
// both; it heartbeats, /readyz says Vault is fine, and the Vault metrics
// are served. A wrong secret id or a missing KV path stops the start with
// an error naming the setting.
func TestVaultAgentSecrets(t *testing.T) {
	clearNATSEnv(t)
	srv := vaultlocal.Start(t)
	root, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	if err := root.Sys().Mount("pki", &api.MountInput{Type: "pki", Config: api.MountConfigInput{MaxLeaseTTL: "87600h"}}); err != nil {
		t.Fatal(err)
	}
	ca := vaultWrite(t, root, "pki/root/generate/internal", map[string]any{"common_name": "meridian-root", "ttl": "87600h", "key_type": "ec", "key_bits": 256})
	caPEM := ca.Data["certificate"].(string)
	vaultWrite(t, root, "pki/roles/meridian-agent", map[string]any{"allowed_domains": "agents.meridian", "allow_subdomains": true,
		"key_type": "any", "max_ttl": "24h", "client_flag": true, "server_flag": false})
	vaultWrite(t, root, "pki/roles/nats-server", map[string]any{"allow_any_name": true, "allow_ip_sans": true, "key_type": "ec", "key_bits": 256, "max_ttl": "24h"})
	srvCert := vaultWrite(t, root, "pki/issue/nats-server", map[string]any{"common_name": "nats", "ip_sans": "127.0.0.1", "ttl": "1h"})
	pair, err := tls.X509KeyPair([]byte(srvCert.Data["certificate"].(string)), []byte(srvCert.Data["private_key"].(string)))
	if err != nil {
		t.Fatal(err)
	}
	if err := root.Sys().PutPolicy("meridian-agent-vault-a", `
path "secret/data/meridian/clusters/vault-a/*" { capabilities = ["read"] }
path "pki/sign/meridian-agent" { capabilities = ["update"] }
`); err != nil {
		t.Fatal(err)
	}
	if err := root.Sys().EnableAuthWithOptions("approle", &api.EnableAuthOptions{Type: "approle"}); err != nil {
		t.Fatal(err)
	}
	vaultWrite(t, root, "auth/approle/role/vault-a", map[string]any{"token_policies": "meridian-agent-vault-a", "token_ttl": "1h", "token_max_ttl": "24h"})
	roleID, err := root.Logical().Read("auth/approle/role/vault-a/role-id")
	if err != nil {
		t.Fatal(err)
	}
	secretID := vaultWrite(t, root, "auth/approle/role/vault-a/secret-id", nil)

	// NATS in operator mode (credentials) with mutual TLS (certificate).
	op, _ := nkeys.CreateOperator()
	acc, _ := nkeys.CreateAccount()
	sys, _ := nkeys.CreateAccount()
	opPub, _ := op.PublicKey()
	accPub, _ := acc.PublicKey()
	sysPub, _ := sys.PublicKey()
	ac := jwt.NewAccountClaims(accPub)
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	accJWT, _ := ac.Encode(op)
	sysJWT, _ := jwt.NewAccountClaims(sysPub).Encode(op)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(caPEM))
	ns, err := embednats.Start(embednats.Config{StoreDir: t.TempDir(), Security: &embednats.Security{
		TrustedKeys: []string{opPub}, SystemAccount: sysPub, AccountJWTs: map[string]string{accPub: accJWT, sysPub: sysJWT},
		TLS: &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	user, _ := nkeys.CreateUser()
	userPub, _ := user.PublicKey()
	seed, _ := user.Seed()
	uc := jwt.NewUserClaims(userPub)
	uc.Expires = time.Now().Add(time.Hour).Unix()
	userJWT, _ := uc.Encode(acc)
	creds, _ := jwt.FormatUserConfig(userJWT, seed)
	if _, err := root.KVv2("secret").Put(context.Background(), "meridian/clusters/vault-a/nats", map[string]any{"creds": string(creds)}); err != nil {
		t.Fatal(err)
	}

	roleFile := writeTemp(t, "role-id", roleID.Data["role_id"].(string)+"\n")
	secretFile := writeTemp(t, "secret-id", secretID.Data["secret_id"].(string)+"\n")
	common := []string{"--cluster-id", "vault-a", "--nats-url", ns.ClientURL(), "--sim-example", "a100-fractional",
		"--heartbeat-interval", "50ms", "--log-level", "error", "--nats-tls-ca", writeTemp(t, "ca.pem", caPEM), "--connect-timeout", "10s",
		"--vault-addr", srv.Addr, "--vault-auth", "approle", "--vault-approle-role-id-file", roleFile,
		"--vault-pki-role", "meridian-agent", "--vault-pki-ttl", "1h"}

	// Startup errors name the setting.
	for name, tc := range map[string]struct {
		args []string
		want []string
	}{
		"wrong secret id": {[]string{"--vault-approle-secret-id-file", writeTemp(t, "bad", "nope\n"), "--vault-nats-creds-path", "meridian/clusters/vault-a/nats"},
			[]string{"--vault-auth approle", "invalid"}},
		"missing KV path": {[]string{"--vault-approle-secret-id-file", secretFile, "--vault-nats-creds-path", "meridian/clusters/vault-a/none"},
			[]string{"vault.natsCredsPath (--vault-nats-creds-path)", "secret/meridian/clusters/vault-a/none"}},
		"another cluster's path": {[]string{"--vault-approle-secret-id-file", secretFile, "--vault-nats-creds-path", "meridian/clusters/vault-b/nats"},
			[]string{"vault.natsCredsPath", "permission denied"}},
	} {
		t.Run(name, func(t *testing.T) {
			err := run(context.Background(), append(append([]string{}, common...), tc.args...), io.Discard)
			if err == nil {
				t.Fatal("started")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "nope") {
				t.Error("the error carries the secret id")
			}
		})
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := freeAddr(t)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append(append([]string{}, common...), "--vault-approle-secret-id-file", secretFile,
			"--vault-nats-creds-path", "meridian/clusters/vault-a/nats", "--metrics-addr", addr), io.Discard)
	}()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(20 * time.Second)
	var body string
	for !(strings.Contains(body, "meridian_agent_heartbeats_total") && !strings.Contains(body, "meridian_agent_heartbeats_total 0")) {
		if time.Now().After(deadline) {
			t.Fatalf("no heartbeats with secrets from Vault:\n%s", body)
		}
		select {
		case err := <-done:
			t.Fatalf("run returned early: %v", err)
		default:
		}
		_, body = get("/metrics")
		time.Sleep(50 * time.Millisecond)
	}
	for _, w := range []string{"meridian_vault_up 1", `meridian_vault_secret_expiry_timestamp_seconds{secret="nats-client-cert"}`,
		`meridian_vault_secret_expiry_timestamp_seconds{secret="nats-creds"}`} {
		if !strings.Contains(body, w) {
			t.Errorf("/metrics lacks %s", w)
		}
	}
	code, rz := get("/readyz")
	if code != http.StatusOK || !strings.Contains(rz, "vault: ok") || !strings.Contains(rz, "nats-client-cert valid until") {
		t.Errorf("/readyz = %d %q", code, rz)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not stop")
	}
}
