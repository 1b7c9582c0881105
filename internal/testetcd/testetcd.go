package testetcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/meridian-gpu/meridian/internal/testpki"
)

// Options say how Start secures the member.
type Options struct {
	// PKI, when set, serves clients over TLS with its server certificate
	// and requires a client certificate signed by its CA
	// (--client-cert-auth --trusted-ca-file).
	PKI *testpki.PKI
}

// Etcd is a running member.
type Etcd struct {
	// Endpoint is its client URL: https://127.0.0.1:PORT with a PKI,
	// http:// otherwise.
	Endpoint string
	pki      *testpki.PKI
	e        *embed.Etcd
}

// Start starts a one-member cluster with its data in t's temporary
// directory and stops it when the test ends.
func Start(t testing.TB, o Options) *Etcd {
	t.Helper()
	ec := embed.NewConfig()
	ec.Name = "external"
	ec.Dir = t.TempDir()
	ec.TickMs, ec.ElectionMs = 10, 100
	ec.UnsafeNoFsync = true
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	ec.EnableGRPCGateway = false
	scheme := "http"
	if o.PKI != nil {
		scheme = "https"
		certFile, keyFile := WriteServerPair(t, o.PKI)
		ec.ClientTLSInfo.CertFile, ec.ClientTLSInfo.KeyFile = certFile, keyFile
		ec.ClientTLSInfo.TrustedCAFile = o.PKI.CAFile
		ec.ClientTLSInfo.ClientCertAuth = true
	}
	cu := url.URL{Scheme: scheme, Host: "127.0.0.1:" + strconv.Itoa(freePort(t))}
	pu := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(freePort(t))}
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	e, err := embed.StartEtcd(ec)
	if err != nil {
		t.Fatalf("testetcd: start: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("testetcd: failed while starting: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("testetcd: not ready after 20s")
	}
	return &Etcd{Endpoint: cu.String(), pki: o.PKI, e: e}
}

// Client dials the member as its root user would: with the PKI's client
// certificate, and with user and password when they are not empty. The
// client is closed when the test ends.
func (x *Etcd) Client(t testing.TB, user, password string) *clientv3.Client {
	t.Helper()
	cfg := clientv3.Config{Endpoints: []string{x.Endpoint}, DialTimeout: 5 * time.Second, Username: user, Password: password,
		Logger: zap.NewNop()}
	if x.pki != nil {
		pair, err := tls.LoadX509KeyPair(x.pki.ClientCertFile, x.pki.ClientKeyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: x.pki.Pool, Certificates: []tls.Certificate{pair}}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("testetcd: client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// EnableAuth turns authentication on as docs/operators.md shows: a root
// user (password rootPassword), and a user named user (password
// password) whose role of the same name may read and write /meridian/
// and nothing else.
func (x *Etcd) EnableAuth(t testing.TB, rootPassword, user, password string) {
	t.Helper()
	cli := x.Client(t, "", "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	steps := []struct {
		what string
		do   func() error
	}{
		{"user add root", func() error { _, err := cli.UserAdd(ctx, "root", rootPassword); return err }},
		{"user grant-role root root", func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err }},
		{"role add " + user, func() error { _, err := cli.RoleAdd(ctx, user); return err }},
		{"role grant-permission --prefix readwrite /meridian/", func() error {
			_, err := cli.RoleGrantPermission(ctx, user, "/meridian/", clientv3.GetPrefixRangeEnd("/meridian/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		}},
		{"user add " + user, func() error { _, err := cli.UserAdd(ctx, user, password); return err }},
		{"user grant-role", func() error { _, err := cli.UserGrantRole(ctx, user, user); return err }},
		{"auth enable", func() error { _, err := cli.AuthEnable(ctx); return err }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("testetcd: %s: %v", s.what, err)
		}
	}
}

// WriteServerPair writes the PKI's server certificate and key as PEM
// files, as etcd reads them, and returns their paths.
func WriteServerPair(t testing.TB, p *testpki.PKI) (certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	kder, err := x509.MarshalPKCS8PrivateKey(p.Server.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.Server.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
