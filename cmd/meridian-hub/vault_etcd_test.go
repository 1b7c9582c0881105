package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meridian-gpu/meridian/internal/testpki"
	"github.com/meridian-gpu/meridian/internal/vaultlocal"
)

// TestVaultHubEtcdCredentials: the external etcd's user, password and
// client certificate come from a KV v2 secret; the password stays in
// memory, the PEM files go to a private directory removed at stop. Both
// a Vault and a file credential for etcd are refused, naming the field,
// and a secret without a credential stops the start.
func TestVaultHubEtcdCredentials(t *testing.T) {
	clearEtcdEnv(t)
	for _, k := range []string{"MERIDIAN_VAULT_ADDR", "MERIDIAN_VAULT_TOKEN_FILE", "MERIDIAN_VAULT_CA_FILE"} {
		t.Setenv(k, "")
	}
	srv := vaultlocal.Start(t)
	root, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	pki := testpki.New(t)
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	ctx := context.Background()
	if _, err := root.KVv2("secret").Put(ctx, "meridian/hub/etcd", map[string]any{"username": "meridian", "password": "s3cret-pw",
		"ca": read(pki.CAFile), "cert": read(pki.ClientCertFile), "key": read(pki.ClientKeyFile)}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.KVv2("secret").Put(ctx, "meridian/hub/empty", map[string]any{"note": "nothing"}); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(vaultlocal.RootToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--etcd-endpoints", "https://127.0.0.1:2379", "--nats-url", "nats://127.0.0.1:4222",
		"--vault-addr", srv.Addr, "--vault-auth", "token", "--vault-token-file", tokenFile}

	o, err := parseFlags(append(base, "--vault-etcd-path", "meridian/hub/etcd"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	stop, err := startVault(ctx, o, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	e := o.cfg.EtcdClient
	if e.Username != "meridian" || e.Password != "s3cret-pw" || e.PasswordFile != "" {
		t.Fatalf("etcd user %q, password set %v, password file %q", e.Username, e.Password != "", e.PasswordFile)
	}
	for _, f := range []struct{ path, want string }{{e.CAFile, pki.CAFile}, {e.CertFile, pki.ClientCertFile}, {e.KeyFile, pki.ClientKeyFile}} {
		if f.path == "" || read(f.path) != read(f.want) {
			t.Fatalf("etcd file %q does not hold %s", f.path, f.want)
		}
		if st, err := os.Stat(f.path); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: mode %v, %v", f.path, st.Mode(), err)
		}
	}
	stop()
	if _, err := os.Stat(filepath.Dir(e.KeyFile)); !os.IsNotExist(err) {
		t.Fatalf("the private directory is left after stop: %v", err)
	}

	if _, err := parseFlags(append(base, "--vault-etcd-path", "meridian/hub/etcd", "--etcd-username", "x"), io.Discard); err == nil ||
		!strings.Contains(err.Error(), "vault.etcdPath") {
		t.Fatalf("Vault and flag credentials together: %v", err)
	}
	o, err = parseFlags(append(base, "--vault-etcd-path", "meridian/hub/empty"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := startVault(ctx, o, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "vault.etcdPath (--vault-etcd-path)") {
		t.Fatalf("a secret without a credential: %v", err)
	}
}
