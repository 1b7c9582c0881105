package main

import (
	"context"
	"crypto/tls"
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

// clearNATSEnv keeps the caller's MERIDIAN_NATS_* variables out of a test.
func clearNATSEnv(t *testing.T) {
	for _, k := range []string{"MERIDIAN_NATS_CREDS", "MERIDIAN_NATS_NKEY", "MERIDIAN_NATS_USER", "MERIDIAN_NATS_PASSWORD",
		"MERIDIAN_NATS_PASSWORD_FILE", "MERIDIAN_NATS_TOKEN", "MERIDIAN_NATS_TOKEN_FILE", "MERIDIAN_NATS_TLS_CA",
		"MERIDIAN_NATS_TLS_CERT", "MERIDIAN_NATS_TLS_KEY"} {
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
	notPEM := writeTemp(t, "ca.txt", "hello")
	base := []string{"--cluster-id", "c1", "--nats-url", "nats://127.0.0.1:1", "--sim-example", "h100-nvlink"}
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want []string
	}{
		"creds missing":        {[]string{"--nats-creds", missing}, nil, []string{"--nats-creds", missing, "does not exist"}},
		"creds missing (env)":  {nil, map[string]string{"MERIDIAN_NATS_CREDS": missing}, []string{"--nats-creds", "does not exist"}},
		"nkey missing":         {[]string{"--nats-nkey", missing}, nil, []string{"--nats-nkey", "does not exist"}},
		"token file missing":   {[]string{"--nats-token-file", missing}, nil, []string{"--nats-token-file", "does not exist"}},
		"token file empty":     {[]string{"--nats-token-file", writeTemp(t, "tok", "\n")}, nil, []string{"--nats-token-file", "is empty"}},
		"password file absent": {[]string{"--nats-user", "a", "--nats-password-file", missing}, nil, []string{"--nats-password-file", "does not exist"}},
		"user, no password":    {[]string{"--nats-user", "a"}, nil, []string{"--nats-user", "--nats-password-file"}},
		"CA missing":           {[]string{"--nats-tls-ca", missing}, nil, []string{"--nats-tls-ca", "does not exist"}},
		"CA not PEM":           {[]string{"--nats-tls-ca", notPEM}, nil, []string{"--nats-tls-ca", "no PEM certificate"}},
		"key without cert":     {[]string{"--nats-tls-key", notPEM}, nil, []string{"--nats-tls-key", "without a --nats-tls-cert"}},
		"two credentials":      {[]string{"--nats-creds", notPEM, "--nats-token-file", notPEM}, nil, []string{"one NATS credential"}},
		"URL with credentials": {[]string{"--nats-url", "nats://u:p@hub:4222", "--nats-token-file", notPEM}, nil, []string{"--nats-url carries credentials"}},
	} {
		t.Run(name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, err := parseFlags(append(append([]string{}, base...), tc.args...), io.Discard)
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

// TestRunWithNATSTokenAndTLS runs the agent against a real NATS server that
// requires TLS and a token: with the token file and CA it heartbeats; with
// a wrong token it exits with the server's refusal.
func TestRunWithNATSTokenAndTLS(t *testing.T) {
	clearNATSEnv(t)
	pki := testpki.New(t)
	caFile, serverCert := pki.CAFile, pki.Server
	ns, err := embednats.Start(embednats.Config{StoreDir: t.TempDir(), Security: &embednats.Security{
		Token: "agent-token", TLS: &tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	common := []string{"--cluster-id", "secure-a", "--nats-url", ns.ClientURL(), "--sim-example", "a100-fractional",
		"--heartbeat-interval", "50ms", "--log-level", "error", "--nats-tls-ca", caFile, "--connect-timeout", "5s"}

	err = run(context.Background(), append(common, "--nats-token-file", writeTemp(t, "bad", "wrong\n")), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "Authorization Violation") {
		t.Fatalf("wrong token: run = %v, want an Authorization Violation", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := freeAddr(t)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append(common, "--nats-token-file", writeTemp(t, "good", "agent-token\n"), "--metrics-addr", addr), io.Discard)
	}()
	deadline := time.Now().Add(15 * time.Second)
	var body string
	for time.Now().Before(deadline) && !(strings.Contains(body, "meridian_agent_heartbeats_total") && !strings.Contains(body, "meridian_agent_heartbeats_total 0")) {
		select {
		case err := <-done:
			t.Fatalf("run returned early: %v", err)
		default:
		}
		if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(body, "meridian_agent_heartbeats_total") || strings.Contains(body, "meridian_agent_heartbeats_total 0") {
		t.Fatalf("no heartbeats over TLS with a token:\n%s", body)
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
