package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/internal/testpki"
	"github.com/meridian-gpu/meridian/internal/tlsreload"
)

// With TLS on, the REST gateway still reaches the gRPC server over its
// in-process pipe: the pipe must not expect a TLS handshake (it once did,
// and every REST call answered 503 "error reading server preface").
func TestRESTOverTLSReachesTheGRPCServer(t *testing.T) {
	pki := testpki.New(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "hub.crt"), filepath.Join(dir, "hub.key")
	writePEM(t, certFile, "CERTIFICATE", pki.Server.Certificate[0])
	key, err := x509.MarshalPKCS8PrivateKey(pki.Server.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, keyFile, "PRIVATE KEY", key)
	tokenFile := filepath.Join(dir, "admin-token")
	s, _ := runHub(t, Config{DataDir: filepath.Join(dir, "data"), HubID: "hub-tls", UnsafeNoFsync: true, LeaderTTL: time.Second, Logger: testLogger(),
		Security: Security{Mode: AuthOn, TLS: tlsreload.Files{CertFile: certFile, KeyFile: keyFile, ClientCAFile: pki.CAFile}, AdminTokenFile: tokenFile}})
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.Pool}}, Timeout: 10 * time.Second}
	req, _ := http.NewRequest(http.MethodGet, "https://"+s.Addrs().HTTP+"/v1/whoami", nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "bootstrap-admin") {
		t.Fatalf("GET /v1/whoami over TLS: %d %s; want 200 naming bootstrap-admin", resp.StatusCode, body)
	}
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// warnRecorder keeps the messages of the records at warning level or above.
type warnRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnRecorder) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, r.Message)
	return nil
}
func (w *warnRecorder) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnRecorder) WithGroup(string) slog.Handler      { return w }

func (w *warnRecorder) count(substr string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, m := range w.msgs {
		if strings.Contains(m, substr) {
			n++
		}
	}
	return n
}

// --auth=none logs a warning at every start, whether asked for or taken
// as the loopback default of an embedded hub; authentication on logs none.
func TestAuthNoneWarnsAtEveryStart(t *testing.T) {
	const warning = "API AUTHENTICATION IS OFF"
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		mode string
		want int
	}{
		{"explicit none", AuthNone, 1},
		{"loopback default", "", 1},
		{"on", AuthOn, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &warnRecorder{}
			for start := 1; start <= 2; start++ {
				s, err := New(Config{DataDir: filepath.Join(dir, tc.name), HubID: "hub-warn", UnsafeNoFsync: true,
					GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Logger: slog.New(rec), Security: Security{Mode: tc.mode}})
				if err != nil {
					t.Fatal(err)
				}
				_ = s.Close()
				if got := rec.count(warning); got != start*tc.want {
					t.Fatalf("after start %d: %d warnings %q, want %d (warnings: %q)", start, got, warning, start*tc.want, rec.msgs)
				}
			}
		})
	}
}
