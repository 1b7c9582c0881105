package tlsreload

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Files names the PEM files to serve. CertFile and KeyFile are required;
// ClientCAFile is optional (no client certificates are requested without
// it).
type Files struct {
	CertFile, KeyFile, ClientCAFile string
}

// DefaultCheckEvery bounds how often the files are stat'ed: at most once
// per period, on a handshake.
const DefaultCheckEvery = time.Second

// Reloader holds the current certificate and client CA pool.
type Reloader struct {
	files      Files
	log        *slog.Logger
	now        func() time.Time
	checkEvery time.Duration

	mu      sync.Mutex
	checked time.Time
	stamp   string
	cert    *tls.Certificate
	pool    *x509.CertPool
	loads   int
}

// Option adjusts a Reloader.
type Option func(*Reloader)

// WithLogger sets where reload failures and successes are logged.
func WithLogger(l *slog.Logger) Option { return func(r *Reloader) { r.log = l } }

// WithCheckEvery sets the least time between two looks at the files.
func WithCheckEvery(d time.Duration) Option { return func(r *Reloader) { r.checkEvery = d } }

// WithClock replaces time.Now (tests).
func WithClock(now func() time.Time) Option { return func(r *Reloader) { r.now = now } }

// New loads the files once. Its error names the file that is missing or
// does not parse.
func New(f Files, opts ...Option) (*Reloader, error) {
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, errors.New("tls: both a certificate file (--tls-cert) and a key file (--tls-key) are required")
	}
	r := &Reloader{files: f, log: slog.New(slog.DiscardHandler), now: time.Now, checkEvery: DefaultCheckEvery}
	for _, o := range opts {
		o(r)
	}
	stamp, err := r.stampNow()
	if err != nil {
		return nil, err
	}
	cert, pool, err := load(f)
	if err != nil {
		return nil, err
	}
	r.cert, r.pool, r.stamp, r.checked, r.loads = cert, pool, stamp, r.now(), 1
	return r, nil
}

// stampNow summarises the files' sizes and modification times.
func (r *Reloader) stampNow() (string, error) {
	s := ""
	for flag, name := range map[string]string{"--tls-cert": r.files.CertFile, "--tls-key": r.files.KeyFile, "--tls-client-ca": r.files.ClientCAFile} {
		if name == "" {
			continue
		}
		fi, err := os.Stat(name)
		if err != nil {
			return "", fmt.Errorf("tls: %s %s: %w", flag, name, err)
		}
		s += fmt.Sprintf("%s:%d:%d;", flag, fi.Size(), fi.ModTime().UnixNano())
	}
	return s, nil
}

func load(f Files) (*tls.Certificate, *x509.CertPool, error) {
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: --tls-cert %s / --tls-key %s: %w", f.CertFile, f.KeyFile, err)
	}
	if cert.Leaf == nil && len(cert.Certificate) > 0 {
		cert.Leaf, _ = x509.ParseCertificate(cert.Certificate[0])
	}
	var pool *x509.CertPool
	if f.ClientCAFile != "" {
		pem, err := os.ReadFile(f.ClientCAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("tls: --tls-client-ca %s: %w", f.ClientCAFile, err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("tls: --tls-client-ca %s: no PEM certificate in it", f.ClientCAFile)
		}
	}
	return &cert, pool, nil
}

// current returns the certificate and pool, reloading them first when the
// files changed since the last look (at most once per checkEvery).
func (r *Reloader) current() (*tls.Certificate, *x509.CertPool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if now.Sub(r.checked) < r.checkEvery {
		return r.cert, r.pool
	}
	r.checked = now
	stamp, err := r.stampNow()
	if err != nil || stamp == r.stamp {
		if err != nil {
			r.log.Error("tls: cannot look at the certificate files; serving the last good ones", "err", err)
		}
		return r.cert, r.pool
	}
	cert, pool, err := load(r.files)
	if err != nil {
		// Likely a rotation caught half-way (a new certificate beside the
		// old key): keep serving, look again next time.
		r.log.Error("tls: reload failed; serving the last good certificate", "err", err)
		return r.cert, r.pool
	}
	r.cert, r.pool, r.stamp = cert, pool, stamp
	r.loads++
	r.log.Info("tls: certificate files reloaded", "cert", r.files.CertFile, "not_after", notAfter(cert))
	return r.cert, r.pool
}

func notAfter(c *tls.Certificate) string {
	if c.Leaf == nil {
		return ""
	}
	return c.Leaf.NotAfter.UTC().Format(time.RFC3339)
}

// Loads says how many times the files were loaded (1 after New).
func (r *Reloader) Loads() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.loads
}

// ServerConfig returns a TLS configuration for a listener that serves the
// current certificate on every new connection. With a client CA it
// requests a client certificate without verifying it (see VerifyClient).
// h2 is offered for gRPC and HTTP/2.
func (r *Reloader) ServerConfig() *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		cert, pool := r.current()
		c := base.Clone()
		c.GetConfigForClient = nil
		c.Certificates = []tls.Certificate{*cert}
		if pool != nil {
			c.ClientAuth = tls.RequestClientCert
		}
		return c, nil
	}
	return base
}

// ErrNoClientCA is VerifyClient's error when no client CA is configured.
var ErrNoClientCA = errors.New("tls: client certificates are not accepted here (no --tls-client-ca)")

// VerifyClient checks a client's certificate chain, as presented in the
// handshake, against the current client CA bundle and returns the
// verified chains.
func (r *Reloader) VerifyClient(peer []*x509.Certificate) ([][]*x509.Certificate, error) {
	_, pool := r.current()
	if pool == nil {
		return nil, ErrNoClientCA
	}
	if len(peer) == 0 {
		return nil, errors.New("tls: no client certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range peer[1:] {
		inter.AddCert(c)
	}
	chains, err := peer[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, CurrentTime: r.now()})
	if err != nil {
		return nil, fmt.Errorf("tls: client certificate %q: %w", peer[0].Subject.CommonName, err)
	}
	return chains, nil
}
