package tlsreload

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// ca is a throwaway certificate authority.
type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) *ca {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &ca{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// leaf signs a certificate for 127.0.0.1 with the given serial and returns
// its PEM certificate and key.
func (c *ca) leaf(t *testing.T, serial int64, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn, Organization: []string{"ml"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestNewNamesTheBadFile(t *testing.T) {
	dir := t.TempDir()
	root := newCA(t, "root")
	cp, kp := root.leaf(t, 2, "hub")
	write(t, filepath.Join(dir, "c.pem"), cp)
	write(t, filepath.Join(dir, "k.pem"), kp)
	write(t, filepath.Join(dir, "junk.pem"), []byte("not pem"))
	for name, tc := range map[string]struct {
		f    Files
		want string
	}{
		"no key":         {Files{CertFile: filepath.Join(dir, "c.pem")}, "--tls-key"},
		"missing cert":   {Files{CertFile: filepath.Join(dir, "none.pem"), KeyFile: filepath.Join(dir, "k.pem")}, "--tls-cert"},
		"key is no key":  {Files{CertFile: filepath.Join(dir, "c.pem"), KeyFile: filepath.Join(dir, "junk.pem")}, "--tls-key"},
		"client CA junk": {Files{CertFile: filepath.Join(dir, "c.pem"), KeyFile: filepath.Join(dir, "k.pem"), ClientCAFile: filepath.Join(dir, "junk.pem")}, "--tls-client-ca"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(tc.f)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New() error %v, want one naming %s", err, tc.want)
			}
		})
	}
}

// A rotated certificate is served to new connections without a restart;
// a connection opened before keeps working; a half-written rotation keeps
// the last good certificate.
func TestRotationWithoutRestart(t *testing.T) {
	dir := t.TempDir()
	root := newCA(t, "root")
	f := Files{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}
	c1, k1 := root.leaf(t, 101, "hub")
	write(t, f.CertFile, c1)
	write(t, f.KeyFile, k1)
	clk := &clock{t: time.Now()}
	r, err := New(f, WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })}
	go srv.Serve(tls.NewListener(lis, r.ServerConfig()))
	defer srv.Close()

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(root.pem)
	newClient := func() *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	}
	serial := func(c *http.Client) int64 {
		t.Helper()
		resp, err := c.Get("https://" + lis.Addr().String() + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.TLS.PeerCertificates[0].SerialNumber.Int64()
	}
	old := newClient()
	if s := serial(old); s != 101 {
		t.Fatalf("first certificate serial %d, want 101", s)
	}

	c2, k2 := root.leaf(t, 102, "hub")
	write(t, f.CertFile, c2)
	write(t, f.KeyFile, k2)
	clk.add(2 * DefaultCheckEvery)
	if s := serial(newClient()); s != 102 {
		t.Fatalf("after rotation a new connection sees serial %d, want 102", s)
	}
	if s := serial(old); s != 101 {
		t.Fatalf("the connection opened before the rotation sees serial %d; it should keep 101 (and stay open)", s)
	}

	c3, _ := root.leaf(t, 103, "hub") // a new certificate beside the old key
	write(t, f.CertFile, c3)
	clk.add(2 * DefaultCheckEvery)
	if s := serial(newClient()); s != 102 {
		t.Fatalf("a half-written rotation is served (serial %d); want the last good 102", s)
	}
	if r.Loads() != 2 {
		t.Fatalf("loads = %d, want 2 (initial + one good rotation)", r.Loads())
	}
}

func TestVerifyClient(t *testing.T) {
	dir := t.TempDir()
	root, other := newCA(t, "root"), newCA(t, "other")
	cp, kp := root.leaf(t, 2, "hub")
	f := Files{CertFile: filepath.Join(dir, "c.pem"), KeyFile: filepath.Join(dir, "k.pem"), ClientCAFile: filepath.Join(dir, "ca.pem")}
	write(t, f.CertFile, cp)
	write(t, f.KeyFile, kp)
	write(t, f.ClientCAFile, root.pem)
	r, err := New(f)
	if err != nil {
		t.Fatal(err)
	}
	parse := func(p []byte) *x509.Certificate {
		b, _ := pem.Decode(p)
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	good, _ := root.leaf(t, 3, "alice")
	chains, err := r.VerifyClient([]*x509.Certificate{parse(good)})
	if err != nil || len(chains) == 0 || chains[0][0].Subject.CommonName != "alice" {
		t.Fatalf("a certificate of the client CA: chains %v, err %v", chains, err)
	}
	bad, _ := other.leaf(t, 4, "mallory")
	if _, err := r.VerifyClient([]*x509.Certificate{parse(bad)}); err == nil {
		t.Fatal("a certificate from another CA was accepted")
	}
	if _, err := r.VerifyClient(nil); err == nil {
		t.Fatal("no certificate was accepted")
	}
	noCA, err := New(Files{CertFile: f.CertFile, KeyFile: f.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noCA.VerifyClient([]*x509.Certificate{parse(good)}); err != ErrNoClientCA {
		t.Fatalf("without a client CA: %v, want ErrNoClientCA", err)
	}
}
