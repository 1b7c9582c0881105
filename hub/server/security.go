package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/test/bufconn"

	"github.com/meridian-gpu/meridian/hub/api"
	"github.com/meridian-gpu/meridian/hub/audit"
	"github.com/meridian-gpu/meridian/hub/auth"
	"github.com/meridian-gpu/meridian/hub/authz"
	"github.com/meridian-gpu/meridian/internal/tlsreload"
)

// The authentication modes.
const (
	AuthOn   = "on"
	AuthNone = "none"
)

// LocalAdminsGroup is the group of the principal every request has under
// --auth=none; it holds admin.
const LocalAdminsGroup = "meridian:local-admins"

// Security configures who may use the API, over what transport, and what
// is recorded.
type Security struct {
	// Mode is AuthOn (the default of meridian-hub) or AuthNone. Empty
	// means AuthNone when both API addresses are loopback (tests and
	// programs that embed a hub) and AuthOn otherwise. AuthNone is refused
	// beyond loopback and logged as a warning at every start.
	Mode string
	// OIDC issuers whose bearer tokens are accepted.
	OIDC []auth.IssuerConfig
	// Authorization maps groups and users to global permissions.
	Authorization authz.Config
	// TLS serves both listeners from these files (reloaded when they
	// change); ClientCAFile turns on client certificates.
	TLS tlsreload.Files
	// AllowInsecureNonLoopback lets a listener beyond loopback serve
	// without TLS: credentials then cross the network in clear text.
	AllowInsecureNonLoopback bool
	// AuditFile receives one JSON line per audit event; "-" is standard
	// output, empty writes none (the etcd log is always kept).
	AuditFile string
	// AuditMaxAge and AuditMaxEvents bound the etcd audit log; 0 means
	// audit's defaults.
	AuditMaxAge    time.Duration
	AuditMaxEvents int
	// AdminTokenFile, when set and the file does not exist yet, gets a new
	// API token with the admin permission at start (mode 0600): the first
	// credential of a new hub, and how `make demo` hands one to the CLI.
	AdminTokenFile string
	// AdminTokenTTL is that token's lifetime; 0 means 30 days.
	AdminTokenTTL time.Duration
}

// isLoopback reports whether a listen address is on loopback only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// mode resolves Security.Mode and checks it against the addresses.
func (c *Config) securityMode() (string, error) {
	loop := isLoopback(c.GRPCAddr) && isLoopback(c.HTTPAddr)
	sec := c.Security
	mode := sec.Mode
	if mode == "" {
		mode = AuthOn
		if loop {
			mode = AuthNone
		}
	}
	switch mode {
	case AuthOn:
	case AuthNone:
		if !loop {
			return "", fmt.Errorf("server: --auth=none is allowed only when both API addresses are loopback (gRPC %s, REST %s)", c.GRPCAddr, c.HTTPAddr)
		}
	default:
		return "", fmt.Errorf("server: --auth %q: want %q or %q", mode, AuthOn, AuthNone)
	}
	if sec.TLS.CertFile == "" && !loop && !sec.AllowInsecureNonLoopback {
		return "", fmt.Errorf("server: an API listener beyond loopback (gRPC %s, REST %s) needs TLS (--tls-cert, --tls-key); "+
			"--insecure-allow-plaintext-non-loopback serves without it, sending credentials in clear text", c.GRPCAddr, c.HTTPAddr)
	}
	return mode, nil
}

// security holds what the API's guard is built from.
type security struct {
	mode     string
	tls      *tlsreload.Reloader
	guard    *api.Guard
	tokens   *auth.Tokens
	oidc     *auth.OIDC
	recorder *audit.Recorder
	auditOut io.WriteCloser
	pipe     *bufconn.Listener
}

// pipeAddr is the network name of the gateway's in-process connection.
const pipeNetwork = "bufconn"

// buildSecurity makes the authenticator chain, the audit recorder, the
// TLS reloader and the guard.
func (s *Server) buildSecurity(mode string) (*security, error) {
	sec := s.cfg.Security
	out := &security{mode: mode, pipe: bufconn.Listen(1 << 20)}
	log := s.log.With("component", "auth")
	if sec.TLS.CertFile != "" || sec.TLS.KeyFile != "" {
		r, err := tlsreload.New(sec.TLS, tlsreload.WithLogger(log))
		if err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		out.tls = r
	}
	var sink io.Writer
	if sec.AuditFile != "" {
		f, err := audit.OpenFile(sec.AuditFile)
		if err != nil {
			return nil, fmt.Errorf("server: --audit-log: %w", err)
		}
		out.auditOut, sink = f, f
	}
	out.recorder = audit.New(audit.Config{JSONLines: sink, Etcd: s.cli, MaxAge: sec.AuditMaxAge, MaxEvents: sec.AuditMaxEvents,
		Logger: s.log.With("component", "audit"), Clock: s.cfg.Clock})

	authzCfg := sec.Authorization
	var authn auth.Authenticator
	if mode == AuthNone {
		s.log.Warn("API AUTHENTICATION IS OFF (--auth=none): every caller on this machine acts as local-admin with every permission")
		authn = auth.None{}
		authzCfg.GroupPermissions = copyPerms(authzCfg.GroupPermissions)
		authzCfg.GroupPermissions[LocalAdminsGroup] = []string{string(authz.PermAdmin)}
	} else {
		tokens, err := auth.NewTokens(auth.TokensOptions{Store: auth.NewEtcdTokenStore(s.st), Logger: log, Now: s.cfg.Clock})
		if err != nil {
			return nil, fmt.Errorf("server: API tokens: %w", err)
		}
		out.tokens = tokens
		methods := []auth.Authenticator{tokens}
		if len(sec.OIDC) > 0 {
			o, err := auth.NewOIDC(auth.OIDCOptions{Issuers: sec.OIDC, Logger: log})
			if err != nil {
				return nil, fmt.Errorf("server: OIDC: %w", err)
			}
			out.oidc = o
			methods = append(methods, o)
		}
		if sec.TLS.ClientCAFile != "" {
			methods = append(methods, auth.NewCerts(auth.CertOptions{}))
		}
		authn = auth.NewChain(methods...)
	}
	gc := api.GuardConfig{Authenticator: authn, Authorization: &authzCfg, Audit: out.recorder, Logger: log,
		Trusted: isPipe}
	if out.tls != nil && sec.TLS.ClientCAFile != "" {
		gc.VerifyClient = out.tls.VerifyClient
	}
	g, err := api.NewGuard(gc)
	if err != nil {
		return nil, fmt.Errorf("server: authorization: %w", err)
	}
	out.guard = g
	return out, nil
}

func copyPerms(m map[string][]string) map[string][]string {
	out := make(map[string][]string, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// grpcOptions are the TLS and guard options of the gRPC server.
func (sec *security) grpcOptions() []grpc.ServerOption {
	var opts []grpc.ServerOption
	if sec.tls != nil {
		opts = append(opts, grpc.Creds(pipeAwareCreds{credentials.NewTLS(sec.tls.ServerConfig())}))
	}
	return append(opts, grpc.ChainUnaryInterceptor(sec.guard.Unary()), grpc.ChainStreamInterceptor(sec.guard.Stream()))
}

// pipeAwareCreds serves TLS on the network listener and plain HTTP/2 on
// the gateway's in-process pipe. One grpc.Server applies its credentials
// to every listener it serves, and the gateway dials the pipe without TLS
// (nothing crosses a network there; the REST listener already terminated
// the caller's TLS), so a TLS handshake on the pipe would fail every REST
// request.
type pipeAwareCreds struct {
	credentials.TransportCredentials
}

// ServerHandshake implements credentials.TransportCredentials.
func (c pipeAwareCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if isPipe(conn.RemoteAddr()) {
		return conn, pipeAuthInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
	}
	return c.TransportCredentials.ServerHandshake(conn)
}

// Clone implements credentials.TransportCredentials.
func (c pipeAwareCreds) Clone() credentials.TransportCredentials {
	return pipeAwareCreds{c.TransportCredentials.Clone()}
}

// pipeAuthInfo is the AuthInfo of a gateway pipe connection.
type pipeAuthInfo struct {
	credentials.CommonAuthInfo
}

// AuthType implements credentials.AuthInfo.
func (pipeAuthInfo) AuthType() string { return "in-process-pipe" }

// isPipe reports whether a connection's address is the gateway's pipe.
func isPipe(a net.Addr) bool { return a != nil && a.Network() == pipeNetwork }

// httpListener wraps the REST listener in TLS when configured.
func (sec *security) httpListener(l net.Listener) net.Listener {
	if sec.tls == nil {
		return l
	}
	cfg := sec.tls.ServerConfig()
	cfg.NextProtos = []string{"h2", "http/1.1"}
	return tls.NewListener(l, cfg)
}

// dialPipe connects the gateway to the gRPC server in process.
func (sec *security) dialPipe(context.Context, string) (net.Conn, error) { return sec.pipe.Dial() }

// writeAdminToken issues an admin API token into AdminTokenFile when the
// file does not exist yet.
func (s *Server) writeAdminToken(ctx context.Context) error {
	path := s.cfg.Security.AdminTokenFile
	if path == "" || s.sec.tokens == nil {
		return nil
	}
	if _, err := os.Stat(path); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("server: admin token file %s: %w", path, err)
	}
	ttl := s.cfg.Security.AdminTokenTTL
	if ttl == 0 {
		ttl = 30 * 24 * time.Hour
	}
	sec, rec, err := s.sec.tokens.Issue(ctx, auth.IssueRequest{Name: "bootstrap admin token", User: "bootstrap-admin",
		Roles: []string{string(authz.PermAdmin)}, CreatedBy: "meridian-hub", TTL: ttl})
	if err != nil {
		return fmt.Errorf("server: admin token: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("server: admin token file: %w", err)
	}
	if err := os.WriteFile(path, []byte(sec.Reveal()+"\n"), 0o600); err != nil {
		return fmt.Errorf("server: admin token file: %w", err)
	}
	s.log.Info("wrote a new admin API token", "file", path, "token_id", rec.ID, "expires", rec.ExpiresAt)
	return nil
}

func (sec *security) close() {
	if sec == nil {
		return
	}
	if sec.tokens != nil {
		sec.tokens.Close()
	}
	if sec.oidc != nil {
		sec.oidc.Close()
	}
	_ = sec.recorder.Close()
	if sec.auditOut != nil {
		_ = sec.auditOut.Close()
	}
	_ = sec.pipe.Close()
}
