package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	embednats "github.com/meridian-gpu/meridian/internal/embedded/nats"
	"github.com/meridian-gpu/meridian/internal/testpki"
)

func clearNATSEnv(t *testing.T) {
	for _, k := range []string{"MERIDIAN_NATS_URL", "MERIDIAN_NATS_CREDS", "MERIDIAN_NATS_NKEY", "MERIDIAN_NATS_USER",
		"MERIDIAN_NATS_PASSWORD", "MERIDIAN_NATS_PASSWORD_FILE", "MERIDIAN_NATS_TOKEN", "MERIDIAN_NATS_TOKEN_FILE",
		"MERIDIAN_NATS_TLS_CA", "MERIDIAN_NATS_TLS_CERT", "MERIDIAN_NATS_TLS_KEY", "MERIDIAN_ETCD_ENDPOINTS",
		"MERIDIAN_GRPC_ADDR", "MERIDIAN_HTTP_ADDR"} {
		t.Setenv(k, "")
	}
}

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNATSAuthFlagErrors(t *testing.T) {
	clearNATSEnv(t)
	missing := filepath.Join(t.TempDir(), "absent")
	ext := []string{"--nats-url", "nats://10.0.0.3:4222"}
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want []string
	}{
		"creds without --nats-url": {[]string{"--nats-creds", missing}, nil, []string{"need --nats-url", "embedded NATS"}},
		"TLS env without url":      {nil, map[string]string{"MERIDIAN_NATS_TLS_CA": missing}, []string{"need --nats-url"}},
		"creds missing":            {append(ext, "--nats-creds", missing), nil, []string{"--nats-creds", missing, "does not exist"}},
		"nkey missing":             {append(ext, "--nats-nkey", missing), nil, []string{"--nats-nkey", "does not exist"}},
		"token file missing (env)": {ext, map[string]string{"MERIDIAN_NATS_TOKEN_FILE": missing}, []string{"--nats-token-file", "does not exist"}},
		"CA missing":               {append(ext, "--nats-tls-ca", missing), nil, []string{"--nats-tls-ca", "does not exist"}},
		"cert without key":         {append(ext, "--nats-tls-cert", missing), nil, []string{"--nats-tls-cert", "without a --nats-tls-key"}},
		"user without password":    {append(ext, "--nats-user", "hub"), nil, []string{"--nats-user", "--nats-password-file"}},
	} {
		t.Run(name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, err := parseFlags(tc.args, io.Discard)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestRunWithNATSUserAndMutualTLS runs the hub (embedded etcd) against a
// real NATS server that requires a client certificate and a user
// password: with them it becomes ready; with a wrong password it fails.
func TestRunWithNATSUserAndMutualTLS(t *testing.T) {
	clearNATSEnv(t)
	pki := testpki.New(t)
	caFile, serverCert, pool, crt, key := pki.CAFile, pki.Server, pki.Pool, pki.ClientCertFile, pki.ClientKeyFile
	ns, err := embednats.Start(embednats.Config{StoreDir: t.TempDir(), Security: &embednats.Security{
		Users: map[string]string{"hub": "hub-pw"},
		TLS: &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: pool,
			ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	dir := t.TempDir()
	args := func(pwFile string) []string {
		return []string{"--data-dir", filepath.Join(dir, "data"), "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
			"--addr-file", filepath.Join(dir, "addrs.json"), "--log-level", "error", "--nats-url", ns.ClientURL(),
			"--nats-user", "hub", "--nats-password-file", pwFile,
			"--nats-tls-ca", caFile, "--nats-tls-cert", crt, "--nats-tls-key", key}
	}

	err = run(context.Background(), args(writeTemp(t, "bad", "nope\n")), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "Authorization Violation") {
		t.Fatalf("wrong password: run = %v, want an Authorization Violation", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout syncBuf
	done := make(chan error, 1)
	go func() { done <- run(ctx, args(writeTemp(t, "pw", "hub-pw\n")), &stdout, io.Discard) }()
	deadline := time.Now().Add(20 * time.Second)
	ready := false
	for !ready && time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("run returned early: %v\n%s", err, stdout.String())
		default:
		}
		var info addrInfo
		if b, err := os.ReadFile(filepath.Join(dir, "addrs.json")); err == nil && json.Unmarshal(b, &info) == nil && info.HTTP != "" {
			if resp, err := http.Get("http://" + info.HTTP + "/readyz"); err == nil {
				resp.Body.Close()
				ready = resp.StatusCode == http.StatusOK
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !ready {
		t.Fatalf("the hub did not become ready over mutual TLS with a password\n%s", stdout.String())
	}
	if out := stdout.String(); !strings.Contains(out, ns.ClientURL()+" (external)") {
		t.Errorf("banner does not show the external NATS:\n%s", out)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after stop: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not stop within 15s")
	}
}
