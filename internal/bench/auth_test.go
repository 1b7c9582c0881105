package bench

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meridian-gpu/meridian/hub/auth"
	"github.com/meridian-gpu/meridian/hub/server"
	"github.com/meridian-gpu/meridian/internal/flowwindow"
	"github.com/meridian-gpu/meridian/internal/localrun"
	"github.com/meridian-gpu/meridian/internal/protofast"
	"github.com/meridian-gpu/meridian/internal/testoidc"
	"github.com/meridian-gpu/meridian/internal/testpki"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// The ways the benchmark's hub can run (MERIDIAN_BENCH_AUTH):
//
//   - authNone: authentication off and plaintext, every caller is
//     local-admin: the baseline the others are compared with.
//   - authToken: authentication on over loopback plaintext; every client
//     presents the admin API token the hub wrote at start.
//   - authOIDCTLS: TLS on both listeners and OIDC, as in production. The
//     load comes from benchUsers users, each on its own TLS connection
//     with its own OIDC token from a test issuer in this process, allowed
//     to submit by the queue's access list (group benchGroup); the
//     benchmark's own calls (queues, the Watch, the final list) use the
//     admin API token.
const (
	authNone    = "none"
	authToken   = "token"
	authOIDCTLS = "oidc-tls"
)

const (
	// benchUsers is how many users (and connections) the load comes from.
	benchUsers   = 8
	benchGroup   = "bench-submitters"
	benchAudient = "meridian-bench"
)

// authModes are the modes each case runs under: MERIDIAN_BENCH_AUTH, a
// comma-separated list ("none,oidc-tls" runs every case under both,
// alternating), by default oidc-tls.
func authModes(b *testing.B) []string {
	v := os.Getenv("MERIDIAN_BENCH_AUTH")
	if v == "" {
		return []string{authOIDCTLS}
	}
	var modes []string
	for _, m := range strings.Split(v, ",") {
		switch m = strings.TrimSpace(m); m {
		case authNone, authToken, authOIDCTLS:
			modes = append(modes, m)
		default:
			b.Fatalf("MERIDIAN_BENCH_AUTH: %q is not %s, %s or %s", m, authNone, authToken, authOIDCTLS)
		}
	}
	return modes
}

// benchAuth is one mode's set-up: what the hub is started with, then how
// the benchmark and its users dial it.
type benchAuth struct {
	mode      string
	tokenFile string
	pool      *x509.CertPool // the CA of the hub's certificate (oidc-tls)
	caFile    string         // the same CA, PEM, for the clients' process
	userTok   []string       // OIDC tokens, one per user (oidc-tls)
	admin     string         // the admin API token, once the hub wrote it
}

// newBenchAuth prepares mode: certificates, the OIDC issuer and the
// users' tokens, and the hub's Security settings.
func newBenchAuth(b *testing.B, mode string) (*benchAuth, server.Security) {
	a := &benchAuth{mode: mode}
	if mode == authNone {
		return a, server.Security{Mode: server.AuthNone}
	}
	dir := b.TempDir()
	a.tokenFile = filepath.Join(dir, "admin.token")
	sec := server.Security{Mode: server.AuthOn, AdminTokenFile: a.tokenFile}
	if mode == authToken {
		return a, sec
	}
	pki := testpki.New(b)
	a.pool, a.caFile = pki.Pool, pki.CAFile
	sec.TLS.CertFile, sec.TLS.KeyFile = writeServerCert(b, dir, pki.Server)
	iss := testoidc.New(b)
	sec.OIDC = []auth.IssuerConfig{{IssuerURL: iss.URL, Audience: benchAudient, RootCAs: iss.CAPool, UsernamePrefix: "oidc:"}}
	for u := range benchUsers {
		claims := iss.Claims(benchAudient, fmt.Sprintf("bench-user-%d", u))
		claims["groups"] = []string{benchGroup}
		a.userTok = append(a.userTok, iss.Token(b, claims, nil))
	}
	return a, sec
}

// writeServerCert writes the test PKI's server certificate and key as the
// PEM files the hub reads.
func writeServerCert(b *testing.B, dir string, c tls.Certificate) (certFile, keyFile string) {
	key, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		b.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "hub.crt"), filepath.Join(dir, "hub.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}), 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}), 0o600); err != nil {
		b.Fatal(err)
	}
	return certFile, keyFile
}

// started reads the admin token the hub wrote in New.
func (a *benchAuth) started(b *testing.B) {
	if a.tokenFile == "" {
		return
	}
	raw, err := os.ReadFile(a.tokenFile)
	if err != nil {
		b.Fatal(err)
	}
	a.admin = strings.TrimSpace(string(raw))
}

func (a *benchAuth) transport() grpc.DialOption {
	if a.pool == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: a.pool, MinVersion: tls.VersionTLS12}))
}

// adminDial is how the benchmark's own client dials: with the admin token
// when authentication is on, and the protobuf codec meridianctl uses
// (internal/protofast). The load's users dial as loadSpec.dial says.
func (a *benchAuth) adminDial() []grpc.DialOption {
	opts := a.baseDial()
	if a.admin != "" {
		opts = append(opts, localrun.Bearer(a.admin))
	}
	return opts
}

// baseDial is what every client of the benchmark dials with: the
// transport, meridianctl's codec and the API's fixed flow-control windows.
func (a *benchAuth) baseDial() []grpc.DialOption {
	return append([]grpc.DialOption{a.transport(), protofast.DialOption()}, flowwindow.DialOptions()...)
}

// access is the load queue's access list: the users' group may submit
// and view (empty when the users are admins).
func (a *benchAuth) access() []*meridianv1.AccessEntry {
	if len(a.userTok) == 0 {
		return nil
	}
	return []*meridianv1.AccessEntry{{Subject: "group:" + benchGroup, Verbs: []string{"submit", "view"}}}
}
