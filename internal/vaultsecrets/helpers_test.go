package vaultsecrets_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/vault/api"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	embednats "github.com/meridian-gpu/meridian/internal/embedded/nats"
	"github.com/meridian-gpu/meridian/internal/vaultlocal"
)

func testLogger() *slog.Logger {
	if os.Getenv("MERIDIAN_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func writeFile(t testing.TB, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// rootClient is a root-token client of srv.
func rootClient(t testing.TB, srv *vaultlocal.Server) *api.Client {
	t.Helper()
	c, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// agentPolicy is the policy docs/vault.md gives an agent: read its NATS
// credentials, have its certificate signed.
const agentPolicy = `
path "secret/data/meridian/clusters/east/*" { capabilities = ["read"] }
path "pki/sign/meridian-agent" { capabilities = ["update"] }
`

// setupPKI mounts a PKI engine at pki with a root CA and the role
// meridian-agent (any name, EC or RSA CSRs, at most an hour), and returns
// the CA's PEM.
func setupPKI(t testing.TB, c *api.Client) string {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	must(t, c.Sys().MountWithContext(ctx, "pki", &api.MountInput{Type: "pki", Config: api.MountConfigInput{MaxLeaseTTL: "87600h"}}))
	root, err := c.Logical().WriteWithContext(ctx, "pki/root/generate/internal", map[string]any{
		"common_name": "meridian-test-root", "ttl": "87600h", "key_type": "ec", "key_bits": 256})
	must(t, err)
	_, err = c.Logical().WriteWithContext(ctx, "pki/roles/meridian-agent", map[string]any{
		"allow_any_name": true, "enforce_hostnames": false, "allow_ip_sans": true, "key_type": "any",
		"max_ttl": "1h", "client_flag": true, "server_flag": true, "not_before_duration": "30s"})
	must(t, err)
	_, err = c.Logical().WriteWithContext(ctx, "pki/roles/nats-server", map[string]any{
		"allow_any_name": true, "enforce_hostnames": false, "allow_ip_sans": true, "key_type": "ec", "key_bits": 256,
		"max_ttl": "1h", "server_flag": true, "client_flag": false})
	must(t, err)
	return root.Data["certificate"].(string)
}

// setupAppRole enables AppRole with role meridian-agent (given role id
// and secret id, the agent policy, the token TTLs) and returns files
// holding the role id and secret id.
func setupAppRole(t testing.TB, c *api.Client, roleID, secretID string, ttl, maxTTL time.Duration) (string, string) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	must(t, c.Sys().PutPolicyWithContext(ctx, "meridian-agent", agentPolicy))
	if auths, _ := c.Sys().ListAuthWithContext(ctx); auths["approle/"] == nil {
		must(t, c.Sys().EnableAuthWithOptionsWithContext(ctx, "approle", &api.EnableAuthOptions{Type: "approle"}))
	}
	_, err := c.Logical().WriteWithContext(ctx, "auth/approle/role/meridian-agent", map[string]any{
		"token_policies": "meridian-agent", "token_ttl": int(ttl.Seconds()), "token_max_ttl": int(maxTTL.Seconds()),
		"secret_id_ttl": 0})
	must(t, err)
	_, err = c.Logical().WriteWithContext(ctx, "auth/approle/role/meridian-agent/role-id", map[string]any{"role_id": roleID})
	must(t, err)
	_, err = c.Logical().WriteWithContext(ctx, "auth/approle/role/meridian-agent/custom-secret-id", map[string]any{"secret_id": secretID})
	must(t, err)
	return writeFile(t, "role-id", roleID+"\n"), writeFile(t, "secret-id", secretID+"\n")
}

// natsOperator is an operator-mode NATS setup: an account with JetStream
// and a way to mint user credentials for it.
type natsOperator struct {
	account nkeys.KeyPair
	sec     *embednats.Security
}

func newNATSOperator(t testing.TB) *natsOperator {
	t.Helper()
	op, _ := nkeys.CreateOperator()
	acc, _ := nkeys.CreateAccount()
	sys, _ := nkeys.CreateAccount()
	opPub, _ := op.PublicKey()
	accPub, _ := acc.PublicKey()
	sysPub, _ := sys.PublicKey()
	ac := jwt.NewAccountClaims(accPub)
	ac.Name = "meridian"
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	accJWT, err := ac.Encode(op)
	must(t, err)
	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = "SYS"
	sysJWT, err := sc.Encode(op)
	must(t, err)
	return &natsOperator{account: acc, sec: &embednats.Security{TrustedKeys: []string{opPub}, SystemAccount: sysPub,
		AccountJWTs: map[string]string{accPub: accJWT, sysPub: sysJWT}}}
}

// creds mints decorated credentials of a new user expiring at exp.
func (o *natsOperator) creds(t testing.TB, name string, exp time.Time) (string, string) {
	t.Helper()
	u, _ := nkeys.CreateUser()
	pub, _ := u.PublicKey()
	seed, _ := u.Seed()
	uc := jwt.NewUserClaims(pub)
	uc.Name = name
	if !exp.IsZero() {
		uc.Expires = exp.Unix()
	}
	tok, err := uc.Encode(o.account)
	must(t, err)
	b, err := jwt.FormatUserConfig(tok, seed)
	must(t, err)
	return string(b), pub
}

func startNATS(t testing.TB, sec *embednats.Security) *embednats.Server {
	t.Helper()
	s, err := embednats.Start(embednats.Config{StoreDir: t.TempDir(), Security: sec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// issueServerCert has the PKI role sign a server certificate for
// 127.0.0.1 with the root token (the NATS server's own certificate).
func issueServerCert(t testing.TB, c *api.Client) tls.Certificate {
	t.Helper()
	sec, err := c.Logical().WriteWithContext(ctxFor(t, 30*time.Second), "pki/issue/nats-server", map[string]any{
		"common_name": "nats", "ip_sans": "127.0.0.1", "alt_names": "localhost", "ttl": "1h"})
	must(t, err)
	pair, err := tls.X509KeyPair([]byte(sec.Data["certificate"].(string)), []byte(sec.Data["private_key"].(string)))
	must(t, err)
	return pair
}

func certPool(t testing.TB, caPEM string) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM([]byte(caPEM)) {
		t.Fatal("bad CA PEM")
	}
	return p
}

func pemOf(c *x509.Certificate) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}))
}

// proxy is a loopback TCP proxy with a switchable backend: the tests stop
// Vault and start a new one behind one stable address.
type proxy struct {
	ln      net.Listener
	mu      sync.Mutex
	backend string // host:port; "" refuses (closes) every connection
	conns   map[net.Conn]bool
}

func newProxy(t testing.TB, backend string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	p := &proxy{ln: ln, conns: map[net.Conn]bool{}}
	p.setBackend(backend)
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.setBackend("") })
	return p
}

func (p *proxy) addr() string { return "http://" + p.ln.Addr().String() }

// setBackend switches the backend and cuts every open connection.
func (p *proxy) setBackend(b string) {
	p.mu.Lock()
	p.backend = strings.TrimPrefix(b, "http://")
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
	p.mu.Unlock()
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		b := p.backend
		p.mu.Unlock()
		if b == "" {
			c.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", b, 2*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		go func() { _, _ = io.Copy(up, c); up.Close() }()
		go func() { _, _ = io.Copy(c, up); c.Close() }()
	}
}

func fmtSerial(c *x509.Certificate) string { return fmt.Sprintf("%x", c.SerialNumber) }
