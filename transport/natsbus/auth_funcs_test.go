package natsbus

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"

	embednats "github.com/meridian-gpu/meridian/internal/embedded/nats"
)

// TestCredsFuncAgainstRealServer: credentials served from memory
// authenticate like a .creds file; bad ones are refused before dialling
// without quoting them.
func TestCredsFuncAgainstRealServer(t *testing.T) {
	op := newOperatorSetup(t)
	good := readAll(t, credsFile(t, op.account, time.Now().Add(time.Hour)))
	expired := readAll(t, credsFile(t, op.account, time.Now().Add(-time.Minute)))
	s := secureServer(t, op.sec)
	if err := connectAndPublish(t, s.ClientURL(), WithCredsFunc(func() ([]byte, error) { return []byte(good), nil })); err != nil {
		t.Fatalf("creds from a func: %v", err)
	}
	for name, tc := range map[string]struct {
		get  func() ([]byte, error)
		want string
	}{
		"expired":      {func() ([]byte, error) { return []byte(expired), nil }, "expired"},
		"not creds":    {func() ([]byte, error) { return []byte("s3cr3t-garbage"), nil }, "not NATS credentials"},
		"source fails": {func() ([]byte, error) { return nil, errors.New("vault down") }, "vault down"},
		"nil":          {nil, "nil"},
	} {
		t.Run(name, func(t *testing.T) {
			err := connectAndPublish(t, s.ClientURL(), WithCredsFunc(tc.get))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Fatal("the error quotes the credentials")
			}
		})
	}
}

// TestClientCertificateFuncAgainstRealServer: the certificate the func
// returns is presented for mutual TLS.
func TestClientCertificateFuncAgainstRealServer(t *testing.T) {
	ca, other := newCA(t, "meridian-ca"), newCA(t, "other-ca")
	serverCert, _, _ := ca.issue(t, "nats-server")
	client, _, _ := ca.issue(t, "agent")
	stranger, _, _ := other.issue(t, "stranger")
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	s := secureServer(t, &embednats.Security{TLS: &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}})
	get := func(c tls.Certificate) func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c, nil }
	}
	if err := connectAndPublish(t, s.ClientURL(), WithClientCertificateFunc(ca.pemFile, get(client))); err != nil {
		t.Fatalf("certificate from a func: %v", err)
	}
	if err := connectAndPublish(t, s.ClientURL(), WithClientCertificateFunc(ca.pemFile, get(stranger))); err == nil {
		t.Fatal("connected with a certificate of another CA")
	}
	if err := connectAndPublish(t, s.ClientURL(), WithClientCertificateFunc(ca.pemFile, nil)); err == nil || !strings.Contains(err.Error(), "nil") {
		t.Fatalf("nil func: %v", err)
	}
}
