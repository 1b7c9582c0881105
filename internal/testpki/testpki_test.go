package testpki

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
)

// The server certificate verifies against the CA for 127.0.0.1, and the
// client files load as a key pair the CA also signed.
func TestNewIssuesUsableCertificates(t *testing.T) {
	p := New(t)
	leaf, err := x509.ParseCertificate(p.Server.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: p.Pool, DNSName: "127.0.0.1"}); err != nil {
		t.Fatalf("server certificate: %v", err)
	}
	client, err := tls.LoadX509KeyPair(p.ClientCertFile, p.ClientKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	cl, _ := x509.ParseCertificate(client.Certificate[0])
	if _, err := cl.Verify(x509.VerifyOptions{Roots: p.Pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("client certificate: %v", err)
	}
	ca, err := os.ReadFile(p.CAFile)
	if err != nil || len(ca) == 0 {
		t.Fatalf("CA file: %v", err)
	}
}
