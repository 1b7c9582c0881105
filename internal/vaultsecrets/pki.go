package vaultsecrets

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-gpu/meridian/internal/ctxtime"
)

// PKIConfig is which certificate to ask the PKI secrets engine for.
type PKIConfig struct {
	// Name labels the certificate in metrics, logs and readiness, e.g.
	// "nats-client-cert".
	Name string
	// Mount is the PKI engine's mount, e.g. "pki" (--vault-pki-mount).
	Mount string
	// Role is the PKI role that signs, at <Mount>/sign/<Role> (--vault-pki-role).
	Role string
	// CommonName is the certificate's CN (--vault-pki-common-name).
	CommonName string
	// AltNames are DNS subject alternative names; IPSANs IP ones.
	AltNames, IPSANs []string
	// TTL asks for this lifetime; 0 is the role's default.
	TTL time.Duration
}

// Validate names the flags at fault.
func (c *PKIConfig) Validate() error {
	var errs []error
	if strings.Trim(c.Mount, "/") == "" {
		errs = append(errs, errors.New("--vault-pki-mount: required"))
	}
	if c.Role == "" {
		errs = append(errs, errors.New("--vault-pki-role: required"))
	}
	if c.CommonName == "" {
		errs = append(errs, errors.New("--vault-pki-common-name: required"))
	}
	if c.TTL < 0 {
		errs = append(errs, fmt.Errorf("--vault-pki-ttl: must not be negative (got %s)", c.TTL))
	}
	return errors.Join(errs...)
}

// CertSource holds a certificate from the PKI engine and renews it. Its
// private key is made here (ECDSA P-256, a new one per certificate) and
// never sent anywhere: Vault signs a CSR. It is safe for concurrent use.
type CertSource struct {
	m   *Manager
	cfg PKIConfig

	cur      atomic.Pointer[issued]
	mu       sync.Mutex
	onRotate []func(*tls.Certificate)
}

type issued struct {
	cert     *tls.Certificate
	ca       []*x509.Certificate
	issuedAt time.Time
}

// NewCertSource describes the certificate; call Fetch for the first one.
func (m *Manager) NewCertSource(cfg PKIConfig) (*CertSource, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Mount = strings.Trim(cfg.Mount, "/")
	if cfg.Name == "" {
		cfg.Name = "tls-cert"
	}
	return &CertSource{m: m, cfg: cfg}, nil
}

// OnRotate adds a hook run after each renewal (not the first Fetch), in
// Run's goroutine, e.g. to reconnect with the new certificate.
func (s *CertSource) OnRotate(f func(*tls.Certificate)) {
	s.mu.Lock()
	s.onRotate = append(s.onRotate, f)
	s.mu.Unlock()
}

// Fetch makes a key, has Vault sign its CSR and holds the result. Errors
// name the mount and role.
func (s *CertSource) Fetch(ctx context.Context) error {
	is, err := s.issue(ctx)
	if err != nil {
		err = fmt.Errorf("vault PKI %s/sign/%s (%s): %w", s.cfg.Mount, s.cfg.Role, s.cfg.Name, err)
		s.m.fail("pki", err)
		return err
	}
	s.m.ok()
	prev := s.cur.Swap(is)
	leaf := is.cert.Leaf
	s.m.setExpiry(s.cfg.Name, leaf.NotAfter)
	s.m.met.renews.WithLabelValues(s.cfg.Name).Inc()
	s.m.log.Info("certificate issued by Vault PKI", "secret", s.cfg.Name, "common_name", leaf.Subject.CommonName,
		"serial", fmt.Sprintf("%x", leaf.SerialNumber), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	if prev != nil {
		s.mu.Lock()
		hooks := append([]func(*tls.Certificate){}, s.onRotate...)
		s.mu.Unlock()
		for _, h := range hooks {
			h(is.cert)
		}
	}
	return nil
}

func (s *CertSource) issue(ctx context.Context) (*issued, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	// The names go in the CSR too: a role with use_csr_sans (the default)
	// takes the SANs from the CSR, not from the request's fields.
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: s.cfg.CommonName}, DNSNames: s.cfg.AltNames}
	for _, ip := range s.cfg.IPSANs {
		a := net.ParseIP(ip)
		if a == nil {
			return nil, fmt.Errorf("IP SAN %q is not an IP address", ip)
		}
		tmpl.IPAddresses = append(tmpl.IPAddresses, a)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		return nil, fmt.Errorf("CSR: %w", err)
	}
	req := map[string]any{
		"csr":         string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})),
		"common_name": s.cfg.CommonName,
		"format":      "pem",
	}
	if len(s.cfg.AltNames) > 0 {
		req["alt_names"] = strings.Join(s.cfg.AltNames, ",")
	}
	if len(s.cfg.IPSANs) > 0 {
		req["ip_sans"] = strings.Join(s.cfg.IPSANs, ",")
	}
	if s.cfg.TTL > 0 {
		req["ttl"] = fmt.Sprintf("%ds", int(s.cfg.TTL.Seconds()))
	}
	sec, err := s.m.api.Logical().WriteWithContext(ctx, s.cfg.Mount+"/sign/"+s.cfg.Role, req)
	if err != nil {
		return nil, err
	}
	if sec == nil || sec.Data == nil {
		return nil, errors.New("empty answer")
	}
	certPEM, _ := sec.Data["certificate"].(string)
	leaves, err := parsePEMCerts(certPEM)
	if err != nil || len(leaves) == 0 {
		return nil, fmt.Errorf("answer's certificate: %v", err)
	}
	leaf := leaves[0]
	if !key.PublicKey.Equal(leaf.PublicKey) {
		return nil, errors.New("the signed certificate is not for the key sent")
	}
	var ca []*x509.Certificate
	if chain, ok := sec.Data["ca_chain"].([]any); ok {
		for _, c := range chain {
			if p, ok := c.(string); ok {
				cs, err := parsePEMCerts(p)
				if err != nil {
					return nil, fmt.Errorf("answer's ca_chain: %w", err)
				}
				ca = append(ca, cs...)
			}
		}
	}
	if len(ca) == 0 {
		if p, ok := sec.Data["issuing_ca"].(string); ok {
			ca, _ = parsePEMCerts(p)
		}
	}
	tc := &tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}
	for _, c := range ca {
		if !c.Equal(leaf) && !isSelfSigned(c) { // intermediates only; the peer has the root
			tc.Certificate = append(tc.Certificate, c.Raw)
		}
	}
	return &issued{cert: tc, ca: ca, issuedAt: s.m.now()}, nil
}

func isSelfSigned(c *x509.Certificate) bool {
	return c.CheckSignatureFrom(c) == nil
}

func parsePEMCerts(p string) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	b := []byte(p)
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM certificate")
	}
	return out, nil
}

// Run renews the certificate at two thirds of its lifetime (counted from
// when it was issued: Vault back-dates NotBefore) until ctx ends. A failed
// renewal is retried with backoff, capped so that several tries happen
// before the held certificate expires; the held one is served meanwhile.
func (s *CertSource) Run(ctx context.Context) {
	attempt := 0
	for {
		is := s.cur.Load()
		if is == nil {
			return // Fetch never succeeded; the caller treats that as a startup error
		}
		now := s.m.now()
		var wait time.Duration
		if attempt == 0 {
			wait = RenewAt(is.issuedAt, is.cert.Leaf.NotAfter).Sub(now)
		} else {
			wait = s.m.backoff.RetryDelay(attempt-1, now, is.cert.Leaf.NotAfter)
		}
		if !ctxtime.Sleep(ctx, max(wait, 0)) {
			return
		}
		if err := s.Fetch(ctx); err != nil {
			attempt++
			continue
		}
		attempt = 0
	}
}

// Certificate is the held certificate, nil before the first Fetch.
func (s *CertSource) Certificate() *tls.Certificate {
	if is := s.cur.Load(); is != nil {
		return is.cert
	}
	return nil
}

// CA is the issuing CA chain of the held certificate.
func (s *CertSource) CA() []*x509.Certificate {
	if is := s.cur.Load(); is != nil {
		return is.ca
	}
	return nil
}

// GetClientCertificate serves the held certificate to a TLS client
// (tls.Config.GetClientCertificate).
func (s *CertSource) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	if c := s.Certificate(); c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("no certificate from vault PKI %s/sign/%s yet", s.cfg.Mount, s.cfg.Role)
}

// GetCertificate serves the held certificate to a TLS server
// (tls.Config.GetCertificate).
func (s *CertSource) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.GetClientCertificate(nil)
}
