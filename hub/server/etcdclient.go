package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/meridian-gpu/meridian/internal/credfile"
	embedetcd "github.com/meridian-gpu/meridian/internal/embedded/etcd"
)

// EtcdClient secures the hub's connection to an external etcd
// (Config.EtcdEndpoints): TLS, with a client certificate for mutual TLS,
// and etcd's own user/password authentication. The zero value is a
// plaintext connection without a user, as before. The embedded etcd
// ignores it.
//
// Errors name meridian-hub's flags (--etcd-ca-file and so on), the one
// front end that fills this in.
type EtcdClient struct {
	// CAFile is a PEM bundle of the CAs that sign the etcd servers'
	// certificates; empty: the system's roots. Any of CAFile, CertFile and
	// KeyFile turns TLS on, and then every endpoint must be https://.
	CAFile string
	// CertFile and KeyFile are the hub's client certificate and its key
	// (etcd's --client-cert-auth); give both or neither. All three files
	// are read again when they change, for the next connection.
	CertFile, KeyFile string
	// Username is an etcd user (etcd's --auth, `etcdctl auth enable`);
	// its password comes from Password or PasswordFile, never a flag.
	Username string
	// Password of Username; PasswordFile, when set, holds it instead (one
	// line).
	Password, PasswordFile string
}

// TLS reports whether a TLS setting is given.
func (e EtcdClient) TLS() bool { return e.CAFile != "" || e.CertFile != "" || e.KeyFile != "" }

// check validates the settings against the endpoints without reading any
// file.
func (e EtcdClient) check(endpoints []string) error {
	if len(endpoints) == 0 {
		if e.TLS() || e.Username != "" || e.Password != "" || e.PasswordFile != "" {
			return errors.New("server: the etcd TLS and user settings (--etcd-ca-file, --etcd-cert-file, --etcd-key-file, --etcd-username) need --etcd-endpoints: the embedded etcd listens on loopback without them")
		}
		return nil
	}
	switch {
	case e.CertFile != "" && e.KeyFile == "":
		return fmt.Errorf("server: --etcd-cert-file %q is given without --etcd-key-file", e.CertFile)
	case e.KeyFile != "" && e.CertFile == "":
		return fmt.Errorf("server: --etcd-key-file %q is given without --etcd-cert-file", e.KeyFile)
	}
	if e.Username == "" && (e.Password != "" || e.PasswordFile != "") {
		return fmt.Errorf("server: an etcd password (--etcd-password-file or env %s) needs --etcd-username", EnvEtcdPassword)
	}
	if e.Username != "" && e.Password == "" && e.PasswordFile == "" {
		return fmt.Errorf("server: --etcd-username %q needs --etcd-password-file or env %s", e.Username, EnvEtcdPassword)
	}
	if e.Password != "" && e.PasswordFile != "" {
		return fmt.Errorf("server: give the etcd password once: --etcd-password-file or env %s, not both", EnvEtcdPassword)
	}
	if strings.ContainsAny(e.Username, " \t\r\n") {
		return fmt.Errorf("server: --etcd-username %q holds white space", e.Username)
	}
	for _, ep := range endpoints {
		u, err := url.Parse(ep)
		scheme := ""
		if err == nil && u.Host != "" {
			scheme = u.Scheme
		}
		if e.TLS() && scheme != "https" {
			return fmt.Errorf("server: --etcd-endpoints %q: the etcd TLS settings (--etcd-ca-file, --etcd-cert-file, --etcd-key-file) need https:// endpoints; http:// would connect in plaintext", ep)
		}
	}
	return nil
}

// EnvEtcdPassword is the environment variable meridian-hub reads the etcd
// password from when no --etcd-password-file is given.
const EnvEtcdPassword = "MERIDIAN_ETCD_PASSWORD"

// ClientConfig is the etcd client configuration the hub would use for
// endpoints (TLS, user and password read from their files), for the
// hub's own tools such as the snapshot commands.
func (e EtcdClient) ClientConfig(endpoints []string, log *slog.Logger) (clientv3.Config, error) {
	return e.clientConfig(endpoints, log)
}

// clientConfig builds the client configuration for endpoints: it
// reads and checks the files, so that a missing or damaged one is
// reported by its flag before any connection attempt.
func (e EtcdClient) clientConfig(endpoints []string, log *slog.Logger) (clientv3.Config, error) {
	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: embedetcd.ClientLogger(log)}
	if err := e.check(endpoints); err != nil {
		return cfg, err
	}
	if e.TLS() {
		tc, ca, err := etcdTLS(e, log)
		if err != nil {
			return cfg, fmt.Errorf("server: etcd TLS: %w", err)
		}
		cfg.TLS = tc
		if ca != nil {
			// Replaces the client's own TLS credentials (the last
			// transport credentials given win): the same handshake, with
			// the CA bundle as it is now.
			cfg.DialOptions = append(cfg.DialOptions, grpc.WithTransportCredentials(&reloadingTLS{
				TransportCredentials: credentials.NewTLS(tc), base: tc, ca: ca}))
		}
	}
	if e.Username != "" {
		pw := e.Password
		if e.PasswordFile != "" {
			var err error
			if pw, err = credfile.ReadSecret(e.PasswordFile, "password"); err != nil {
				return cfg, fmt.Errorf("server: --etcd-password-file: %w", err)
			}
		}
		cfg.Username, cfg.Password = e.Username, pw
		if !e.TLS() {
			for _, ep := range endpoints {
				if u, err := url.Parse(ep); err == nil && u.Scheme == "http" && !isLoopback(u.Host) {
					log.Warn("the etcd password goes over plaintext http; use https:// endpoints with --etcd-ca-file", "endpoint", ep)
					break
				}
			}
		}
	}
	return cfg, nil
}

// etcdTLSConfig is etcdTLS's configuration alone.
func etcdTLSConfig(e EtcdClient, log *slog.Logger) (*tls.Config, error) {
	tc, _, err := etcdTLS(e, log)
	return tc, err
}

// etcdTLS reads the CA bundle and the client key pair now. The key pair
// is read again, on a new handshake, after its files changed (the
// configuration's GetClientCertificate); so is the CA bundle, which the
// configuration holds as it was at start, through reloadingTLS.
func etcdTLS(e EtcdClient, log *slog.Logger) (*tls.Config, *caBundle, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	var ca *caBundle
	if e.CAFile != "" {
		ca = &caBundle{file: e.CAFile, log: log}
		if err := ca.load(); err != nil {
			return nil, nil, err
		}
		cfg.RootCAs = ca.pool
	}
	if e.CertFile != "" {
		kp := &keyPair{certFile: e.CertFile, keyFile: e.KeyFile, log: log}
		if err := kp.load(); err != nil {
			return nil, nil, err
		}
		cfg.GetClientCertificate = kp.get
	}
	return cfg, ca, nil
}

var _ credentials.TransportCredentials = (*reloadingTLS)(nil)

// reloadingTLS are gRPC's TLS credentials, except that each client
// handshake trusts the CA bundle as it is now.
type reloadingTLS struct {
	credentials.TransportCredentials // gRPC's TLS, for everything but the client handshake
	base                             *tls.Config
	ca                               *caBundle
}

// ClientHandshake is gRPC's TLS client handshake with the current bundle.
func (r *reloadingTLS) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	cfg := r.base.Clone()
	cfg.RootCAs = r.ca.current()
	return credentials.NewTLS(cfg).ClientHandshake(ctx, authority, conn)
}

// Clone copies the credentials, sharing the bundle.
func (r *reloadingTLS) Clone() credentials.TransportCredentials {
	return &reloadingTLS{TransportCredentials: r.TransportCredentials.Clone(), base: r.base.Clone(), ca: r.ca}
}

// caBundle is the CA bundle of --etcd-ca-file, read again when the file's
// size or modification time changed (looked at most once a second). A
// bundle that fails to load keeps the last good one.
type caBundle struct {
	file string
	log  *slog.Logger

	mu      sync.Mutex
	checked time.Time
	stamp   string
	pool    *x509.CertPool
}

func (c *caBundle) stampNow() (string, error) {
	fi, err := os.Stat(c.file)
	if err != nil {
		return "", fmt.Errorf("--etcd-ca-file %q: %w", c.file, err)
	}
	return fmt.Sprintf("%d:%d", fi.Size(), fi.ModTime().UnixNano()), nil
}

// load reads and checks the file; its errors name the flag.
func (c *caBundle) load() error {
	stamp, _ := c.stampNow()
	b, err := credfile.Read(c.file)
	if err != nil {
		return fmt.Errorf("--etcd-ca-file: %w", err)
	}
	certs, err := credfile.Certificates(b)
	if err != nil {
		return fmt.Errorf("--etcd-ca-file %q: %w", c.file, err)
	}
	pool := x509.NewCertPool()
	for _, crt := range certs {
		pool.AddCert(crt)
	}
	c.mu.Lock()
	c.pool, c.stamp, c.checked = pool, stamp, time.Now()
	c.mu.Unlock()
	return nil
}

// current returns the bundle, reloading it first when the file changed.
func (c *caBundle) current() *x509.CertPool {
	c.mu.Lock()
	recent := time.Since(c.checked) < time.Second
	pool, stamp := c.pool, c.stamp
	if !recent {
		c.checked = time.Now()
	}
	c.mu.Unlock()
	if recent {
		return pool
	}
	if now, err := c.stampNow(); err != nil || now == stamp {
		return pool
	}
	if err := c.load(); err != nil {
		c.log.Error("etcd TLS: reloading the CA bundle failed; using the last good one", "err", err)
		return pool
	}
	c.log.Info("etcd TLS: CA bundle reloaded", "ca", c.file)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pool
}

// keyPair is a client certificate read again, on a new handshake, when
// its files' size or modification time changed (looked at most once a
// second). A pair that fails to load keeps the last good one: a rotation
// caught half-way.
type keyPair struct {
	certFile, keyFile string
	log               *slog.Logger

	mu      sync.Mutex
	checked time.Time
	stamp   string
	cert    *tls.Certificate
}

func (k *keyPair) stampNow() (string, error) {
	s := ""
	for _, f := range []struct{ flag, name string }{{"--etcd-cert-file", k.certFile}, {"--etcd-key-file", k.keyFile}} {
		fi, err := os.Stat(f.name)
		if err != nil {
			return "", fmt.Errorf("%s %q: %w", f.flag, f.name, err)
		}
		s += fmt.Sprintf("%d:%d;", fi.Size(), fi.ModTime().UnixNano())
	}
	return s, nil
}

// load reads and checks both files; its errors name the flag.
func (k *keyPair) load() error {
	stamp, _ := k.stampNow()
	cb, err := credfile.Read(k.certFile)
	if err != nil {
		return fmt.Errorf("--etcd-cert-file: %w", err)
	}
	if _, err := credfile.Certificates(cb); err != nil {
		return fmt.Errorf("--etcd-cert-file %q: %w", k.certFile, err)
	}
	kb, err := credfile.Read(k.keyFile)
	if err != nil {
		return fmt.Errorf("--etcd-key-file: %w", err)
	}
	if blk, _ := pem.Decode(kb); blk == nil || !strings.Contains(blk.Type, "PRIVATE KEY") {
		return fmt.Errorf("--etcd-key-file %q: no PEM private key in it", k.keyFile)
	}
	pair, err := tls.X509KeyPair(cb, kb)
	if err != nil {
		return fmt.Errorf("--etcd-cert-file %q and --etcd-key-file %q do not make a key pair: %w", k.certFile, k.keyFile, err)
	}
	k.mu.Lock()
	k.cert, k.stamp, k.checked = &pair, stamp, time.Now()
	k.mu.Unlock()
	return nil
}

func (k *keyPair) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	k.mu.Lock()
	recent := time.Since(k.checked) < time.Second
	cur, stamp := k.cert, k.stamp
	if !recent {
		k.checked = time.Now()
	}
	k.mu.Unlock()
	if recent {
		return cur, nil
	}
	if now, err := k.stampNow(); err != nil || now == stamp {
		return cur, nil
	}
	if err := k.load(); err != nil {
		k.log.Error("etcd TLS: reloading the client certificate failed; using the last good one", "err", err)
		return cur, nil
	}
	k.log.Info("etcd TLS: client certificate reloaded", "cert", k.certFile)
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cert, nil
}

// explainEtcdError adds to a failed first etcd call what the hub can
// tell about its cause: a refused user or password, a missing
// permission, or, with TLS, the handshake's own error (gRPC reports a
// failed handshake as a bare deadline).
func explainEtcdError(err error, cfg clientv3.Config) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, rpctypes.ErrAuthFailed.Error()):
		return fmt.Errorf("etcd refused user %q (--etcd-username) with this password (--etcd-password-file or env %s): %w", cfg.Username, EnvEtcdPassword, err)
	case strings.Contains(msg, rpctypes.ErrUserEmpty.Error()) || strings.Contains(msg, rpctypes.ErrInvalidAuthToken.Error()):
		return fmt.Errorf("etcd has authentication on: give --etcd-username and its password (--etcd-password-file or env %s): %w", EnvEtcdPassword, err)
	case strings.Contains(msg, rpctypes.ErrPermissionDenied.Error()) && cfg.Username == "":
		return fmt.Errorf("etcd has authentication on and takes the client certificate's common name %q for the user, which may not read /meridian/: "+
			"give --etcd-username and its password, or grant a user of that name a role with readwrite on /meridian/ (docs/operators.md): %w", clientCN(cfg.TLS), err)
	case strings.Contains(msg, rpctypes.ErrPermissionDenied.Error()):
		return fmt.Errorf("etcd user %q may not read /meridian/: grant its role readwrite on the prefix (docs/operators.md): %w", cfg.Username, err)
	}
	if cfg.TLS != nil {
		if herr := probeEtcdTLS(cfg); herr != nil {
			return fmt.Errorf("TLS handshake with %v (the call: %w)", herr, err)
		}
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) && strings.Contains(strings.Join(cfg.Endpoints, ","), "http://") {
		return fmt.Errorf("%w (no answer over plaintext http: is etcd up at this address? an etcd that serves TLS needs https:// endpoints and --etcd-ca-file)", err)
	}
	return err
}

// probeEtcdTLS makes one TLS handshake with each endpoint in turn, as the
// client would, and returns the first failure, named after the setting
// that most likely causes it.
func probeEtcdTLS(cfg clientv3.Config) error {
	for _, ep := range cfg.Endpoints {
		u, err := url.Parse(ep)
		if err != nil || u.Host == "" {
			continue
		}
		tc := cfg.TLS.Clone()
		tc.ServerName = u.Hostname()
		tc.NextProtos = []string{"h2"}
		d := &net.Dialer{Timeout: 2 * time.Second}
		conn, err := tls.DialWithDialer(d, "tcp", u.Host, tc)
		if err == nil {
			// With TLS 1.3 the server checks the client's certificate
			// after the client's handshake ends: read its first frame.
			_ = conn.SetReadDeadline(time.Now().Add(time.Second))
			var b [1]byte
			_, err = conn.Read(b[:])
			conn.Close()
			var ne net.Error
			if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
				continue
			}
		}
		var ua x509.UnknownAuthorityError
		var hn x509.HostnameError
		switch {
		case errors.As(err, &ua):
			return fmt.Errorf("%s: the etcd server's certificate is not signed by a CA in --etcd-ca-file: %w", ep, err)
		case errors.As(err, &hn):
			return fmt.Errorf("%s: the etcd server's certificate does not name this host: %w", ep, err)
		case strings.Contains(err.Error(), "certificate required") || strings.Contains(err.Error(), "bad certificate") ||
			strings.Contains(err.Error(), "unknown certificate authority"):
			if cfg.TLS.GetClientCertificate == nil {
				return fmt.Errorf("%s: etcd wants a client certificate: give --etcd-cert-file and --etcd-key-file: %w", ep, err)
			}
			return fmt.Errorf("%s: etcd refused the client certificate of --etcd-cert-file (not signed by its --trusted-ca-file?): %w", ep, err)
		default:
			return fmt.Errorf("%s: %w", ep, err)
		}
	}
	return nil
}

// clientCN is the common name of the client certificate tc presents.
func clientCN(tc *tls.Config) string {
	if tc == nil || tc.GetClientCertificate == nil {
		return ""
	}
	c, err := tc.GetClientCertificate(&tls.CertificateRequestInfo{})
	if err != nil || c == nil || len(c.Certificate) == 0 {
		return ""
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return ""
	}
	return leaf.Subject.CommonName
}
