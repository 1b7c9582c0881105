package cli

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meridian-gpu/meridian/internal/testpki"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// TLS against a real TLS gRPC server on loopback: verification with
// --ca, the hints when it fails, and mutual TLS.
func TestTLS(t *testing.T) {
	p := testpki.New(t)
	h := newFakeHub()
	h.seed()
	h.auth.tokens = map[string]*meridianv1.Principal{aliceToken: {User: "alice", Method: "oidc"}}
	addr := h.serveTLS(t, &tls.Config{Certificates: []tls.Certificate{p.Server}})
	plain := newFakeHub()
	plainAddr := plain.serve(t)

	for _, tc := range []struct {
		name string
		addr string
		args []string
		code int
		want string
	}{
		{"ca", addr, []string{"--ca", p.CAFile, "--token", aliceToken, "whoami"}, ExitOK, "USER:         alice"},
		{"system roots", addr, []string{"--tls", "--token", aliceToken, "whoami"}, ExitUnavailable, "presented a certificate meridianctl does not trust; pass --ca"},
		{"plaintext to TLS", addr, []string{"whoami"}, ExitUnavailable, "if it serves TLS, add --tls or --ca"},
		{"TLS to plaintext", plainAddr, []string{"--ca", p.CAFile, "whoami"}, ExitUnavailable, "does not speak TLS"},
		{"no such CA file", addr, []string{"--ca", "testdata/nope.pem", "whoami"}, ExitUsage, "--ca: read CA bundle"},
		{"key without cert", addr, []string{"--ca", p.CAFile, "--key", p.ClientKeyFile, "whoami"}, ExitUsage, "--cert and --key go together"},
		{"server name without TLS", addr, []string{"--tls-server-name", "x", "whoami"}, ExitUsage, "a TLS server name needs TLS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runWith(t, tc.addr, nil, "", tc.args...)
			if r.code != tc.code {
				t.Errorf("exit %d, want %d: %s%s", r.code, tc.code, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stdout+r.stderr, tc.want) {
				t.Errorf("output lacks %q:\n%s%s", tc.want, r.stdout, r.stderr)
			}
		})
	}
}

func TestMutualTLS(t *testing.T) {
	p := testpki.New(t)
	h := newFakeHub()
	h.seed()
	addr := h.serveTLS(t, &tls.Config{Certificates: []tls.Certificate{p.Server}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: p.Pool})
	r := runWith(t, addr, nil, "", "--ca", p.CAFile, "--cert", p.ClientCertFile, "--key", p.ClientKeyFile, "whoami")
	if r.code != ExitOK || !strings.Contains(r.stdout, "USER:         client") || !strings.Contains(r.stdout, "METHOD:       cert") {
		t.Fatalf("exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	r = runWith(t, addr, nil, "", "--ca", p.CAFile, "whoami")
	if r.code != ExitUnavailable || !strings.Contains(r.stderr, "client certificate") || !strings.Contains(r.stderr, "pass --cert and --key") {
		t.Errorf("no client certificate: exit %d: %s", r.code, r.stderr)
	}

	// The same from a context whose file names are relative to the
	// configuration file's directory.
	dir := t.TempDir()
	for name, src := range map[string]string{"ca.pem": p.CAFile, "client.crt": p.ClientCertFile, "client.key": p.ClientKeyFile} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, dir, filepath.Join("pki", name), string(b), 0o600)
	}
	cfg := writeFile(t, dir, "config.yaml", "apiVersion: meridian.io/v1\nkind: Config\ncurrentContext: m\ncontexts:\n  - name: m\n    hub: "+addr+
		"\n    ca: pki/ca.pem\n    cert: pki/client.crt\n    key: pki/client.key\n", 0o600)
	r = runWith(t, "", map[string]string{ConfigEnv: cfg}, "", "-v", "whoami")
	if r.code != ExitOK || !strings.Contains(r.stdout, "METHOD:       cert") {
		t.Fatalf("context: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "transport: TLS (context m, ca), CA bundle "+filepath.Join(dir, "pki", "ca.pem")+", client certificate") {
		t.Errorf("-v output:\n%s", r.stderr)
	}
}

// --tls-server-name verifies a certificate issued for another name than
// the address dialled.
func TestTLSServerName(t *testing.T) {
	p := testpki.NewForNames(t, "hub.meridian.test")
	h := newFakeHub()
	h.seed()
	addr := h.serveTLS(t, &tls.Config{Certificates: []tls.Certificate{p.Server}})
	r := runWith(t, addr, nil, "", "--ca", p.CAFile, "whoami")
	if r.code != ExitUnavailable || !strings.Contains(r.stderr, "--tls-server-name") {
		t.Errorf("without server name: exit %d: %s", r.code, r.stderr)
	}
	r = runWith(t, addr, nil, "", "--ca", p.CAFile, "--tls-server-name", "hub.meridian.test", "whoami")
	if r.code != ExitOK {
		t.Errorf("with server name: exit %d: %s", r.code, r.stderr)
	}
}

// A token is never sent in plaintext to a hub that is not on loopback;
// the refusal names where the token came from.
func TestPlaintextTokenRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "config.yaml", "apiVersion: meridian.io/v1\nkind: Config\ncontexts:\n  - name: c\n    hub: hub.example.com:7070\n    token: "+aliceToken+"\n", 0o600)
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"flag", nil, []string{"--hub", "10.1.2.3:7070", "--token", aliceToken}, "refusing to send the token from --token over plaintext to 10.1.2.3:7070"},
		{"env", map[string]string{TokenEnv: aliceToken}, []string{"--hub", "hub.example.com:7070"}, "from env MERIDIAN_TOKEN over plaintext"},
		{"file", nil, []string{"--hub", "hub.example.com:7070", "--token-file", "/nonexistent"}, "from token file /nonexistent (--token-file) over plaintext"},
		{"context", map[string]string{ConfigEnv: cfg}, []string{"--context", "c"}, "from context c, token over plaintext to hub.example.com:7070"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runWith(t, "", tc.env, "", append(tc.args, "list")...)
			if r.code != ExitUsage || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "use TLS") {
				t.Errorf("exit %d: %s", r.code, r.stderr)
			}
			if strings.Contains(r.stderr, aliceToken) {
				t.Errorf("the refusal prints the token: %s", r.stderr)
			}
		})
	}
}

func TestIsLoopback(t *testing.T) {
	for target, want := range map[string]bool{
		"127.0.0.1:7070": true, "[::1]:7070": true, "localhost:7070": true, "LOCALHOST:1": true,
		"127.1.2.3:7070": true, "unix:///run/meridian.sock": true, "dns:///localhost:7070": true,
		"10.0.0.1:7070": false, "hub.example.com:7070": false, "dns:///hub:7070": false, "0.0.0.0:7070": false,
		"localhost.evil.com:7070": false,
	} {
		if got := isLoopback(target); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", target, got, want)
		}
	}
}
