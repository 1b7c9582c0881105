package vaultlocal_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/vault/api"

	"github.com/meridian-gpu/meridian/internal/vaultlocal"
)

// TestVaultDevServerKVAndPKI proves the built server works through its
// real HTTP API: a KV v2 secret written and read back (two versions), and
// a PKI engine with a root CA and a role that signs a CSR into a
// certificate that verifies against that CA.
func TestVaultDevServerKVAndPKI(t *testing.T) {
	srv := vaultlocal.Start(t)
	c, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("KVv2", func(t *testing.T) {
		kv := c.KVv2("secret") // the dev server mounts KV v2 at secret/
		if _, err := kv.Put(ctx, "meridian/spokes/east", map[string]any{"nats-seed": "SUAFIRST"}); err != nil {
			t.Fatalf("put v1: %v", err)
		}
		if _, err := kv.Put(ctx, "meridian/spokes/east", map[string]any{"nats-seed": "SUASECOND"}); err != nil {
			t.Fatalf("put v2: %v", err)
		}
		got, err := kv.Get(ctx, "meridian/spokes/east")
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		if got.Data["nats-seed"] != "SUASECOND" || got.VersionMetadata == nil || got.VersionMetadata.Version != 2 {
			t.Fatalf("latest = %v (version %+v), want SUASECOND at version 2", got.Data, got.VersionMetadata)
		}
		old, err := kv.GetVersion(ctx, "meridian/spokes/east", 1)
		if err != nil || old.Data["nats-seed"] != "SUAFIRST" {
			t.Fatalf("version 1 = %v, %v; want SUAFIRST", old, err)
		}
		if _, err := kv.Get(ctx, "meridian/spokes/absent"); !errors.Is(err, api.ErrSecretNotFound) {
			t.Fatalf("get of a missing secret: %v, want ErrSecretNotFound", err)
		}
	})

	t.Run("PKI", func(t *testing.T) {
		if err := c.Sys().MountWithContext(ctx, "pki", &api.MountInput{
			Type: "pki", Config: api.MountConfigInput{MaxLeaseTTL: "87600h"},
		}); err != nil {
			t.Fatalf("mount pki: %v", err)
		}
		root, err := c.Logical().WriteWithContext(ctx, "pki/root/generate/internal", map[string]any{
			"common_name": "Meridian test root CA", "ttl": "8760h", "key_type": "ec", "key_bits": 256,
		})
		if err != nil {
			t.Fatalf("generate root: %v", err)
		}
		caCert := parseCert(t, root.Data["certificate"])
		if !caCert.IsCA {
			t.Fatalf("root certificate is not a CA: %+v", caCert.Subject)
		}
		if _, err := c.Logical().WriteWithContext(ctx, "pki/roles/spoke", map[string]any{
			"allowed_domains": "spokes.meridian.test", "allow_subdomains": true, "max_ttl": "72h",
			"key_type": "any", "server_flag": false, "client_flag": true,
		}); err != nil {
			t.Fatalf("create role: %v", err)
		}

		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		const cn = "east.spokes.meridian.test"
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn}}, key)
		if err != nil {
			t.Fatal(err)
		}
		csr := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
		signed, err := c.Logical().WriteWithContext(ctx, "pki/sign/spoke", map[string]any{
			"csr": string(csr), "common_name": cn, "ttl": "1h",
		})
		if err != nil {
			t.Fatalf("sign CSR: %v", err)
		}
		leaf := parseCert(t, signed.Data["certificate"])
		if leaf.Subject.CommonName != cn {
			t.Fatalf("signed CN = %q, want %q", leaf.Subject.CommonName, cn)
		}
		if !leaf.PublicKey.(*ecdsa.PublicKey).Equal(&key.PublicKey) {
			t.Fatal("the signed certificate does not carry the CSR's key")
		}
		pool := x509.NewCertPool()
		pool.AddCert(caCert)
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Fatalf("the signed certificate does not verify against the root CA: %v", err)
		}
		// A CSR for a name outside the role is refused.
		evil, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "evil.example.com"}}, key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Logical().WriteWithContext(ctx, "pki/sign/spoke", map[string]any{
			"csr": string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: evil})),
		}); err == nil {
			t.Fatal("the role signed a name outside allowed_domains")
		}
	})
}

// TestVaultDevServerAuthMethods checks that the build has the auth methods
// spoke identity needs (tools/vault/build.sh adds kubernetes to Vault's
// minimal build) and that a userpass login yields a working token.
func TestVaultDevServerAuthMethods(t *testing.T) {
	srv := vaultlocal.Start(t)
	c, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, m := range []string{"approle", "kubernetes", "userpass"} {
		if err := c.Sys().EnableAuthWithOptionsWithContext(ctx, m, &api.EnableAuthOptions{Type: m}); err != nil {
			t.Fatalf("enable auth %s: %v", m, err)
		}
	}
	if _, err := c.Logical().WriteWithContext(ctx, "auth/userpass/users/spoke", map[string]any{
		"password": "s3cret", "token_policies": "default",
	}); err != nil {
		t.Fatalf("create user: %v", err)
	}
	login, err := c.Logical().WriteWithContext(ctx, "auth/userpass/login/spoke", map[string]any{"password": "s3cret"})
	if err != nil || login.Auth == nil || login.Auth.ClientToken == "" {
		t.Fatalf("userpass login: %v, %+v", err, login)
	}
	uc, err := c.Clone()
	if err != nil {
		t.Fatal(err)
	}
	uc.SetToken(login.Auth.ClientToken)
	self, err := uc.Auth().Token().LookupSelfWithContext(ctx)
	if err != nil {
		t.Fatalf("lookup-self with the login token: %v", err)
	}
	if self.Data["display_name"] != "userpass-spoke" {
		t.Fatalf("display_name = %v, want userpass-spoke", self.Data["display_name"])
	}
}

// TestBinaryMissing: a MERIDIAN_VAULT_BIN that names no file is
// ErrNotBuilt, with the way to build it in the message (what a skipping
// test prints).
func TestBinaryMissing(t *testing.T) {
	t.Setenv("MERIDIAN_VAULT_BIN", filepath.Join(t.TempDir(), "no-vault"))
	if _, err := vaultlocal.Binary(); !errors.Is(err, vaultlocal.ErrNotBuilt) {
		t.Fatalf("Binary() = %v, want ErrNotBuilt", err)
	}
	t.Setenv("MERIDIAN_VAULT_BIN", "")
	t.Setenv("MERIDIAN_VAULT_CACHE", t.TempDir())
	_, err := vaultlocal.Binary()
	if !errors.Is(err, vaultlocal.ErrNotBuilt) {
		t.Fatalf("Binary() with an empty cache = %v, want ErrNotBuilt", err)
	}
	if want := "tools/vault/build.sh"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
}

// TestRunningWithoutVaultUp: with no env file, Running is ErrNotRunning.
func TestRunningWithoutVaultUp(t *testing.T) {
	t.Setenv("MERIDIAN_VAULT_DIR", t.TempDir())
	if _, err := vaultlocal.Running(context.Background()); !errors.Is(err, vaultlocal.ErrNotRunning) {
		t.Fatalf("Running() = %v, want ErrNotRunning", err)
	}
	if err := os.WriteFile(filepath.Join(os.Getenv("MERIDIAN_VAULT_DIR"), "env"),
		[]byte("export MERIDIAN_VAULT_ADDR=http://127.0.0.1:1\nexport MERIDIAN_VAULT_TOKEN=root\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := vaultlocal.Running(context.Background()); !errors.Is(err, vaultlocal.ErrNotRunning) {
		t.Fatalf("Running() with a dead address = %v, want ErrNotRunning", err)
	}
}

// TestRunning: Running reads scripts/vault-up.sh's env file and checks
// that the server answers (here a private one stands in for vault-up's).
func TestRunning(t *testing.T) {
	srv := vaultlocal.Start(t)
	dir := t.TempDir()
	t.Setenv("MERIDIAN_VAULT_DIR", dir)
	env := "# written by scripts/vault-up.sh\nexport MERIDIAN_VAULT_ADDR=" + srv.Addr + "\nexport MERIDIAN_VAULT_TOKEN=" + srv.Token + "\n"
	if err := os.WriteFile(filepath.Join(dir, "env"), []byte(env), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := vaultlocal.Running(context.Background())
	if err != nil {
		t.Fatalf("Running: %v", err)
	}
	if got.Addr != srv.Addr || got.Token != srv.Token {
		t.Fatalf("Running = %s %s, want %s %s", got.Addr, got.Token, srv.Addr, srv.Token)
	}
	c, err := got.Client()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Sys().Health(); err != nil {
		t.Fatalf("health through Running's client: %v", err)
	}
	if err := got.Stop(); err != nil { // a no-op: vault-up's server is not ours
		t.Fatal(err)
	}
}

func parseCert(t *testing.T, v any) *x509.Certificate {
	t.Helper()
	s, _ := v.(string)
	b, _ := pem.Decode([]byte(s))
	if b == nil {
		t.Fatalf("not a PEM certificate: %v", v)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatalf("parse certificate: %v", err)
	}
	return c
}
