package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// connSettings is how to reach the hub, after flags, environment and the
// context are merged (flags > environment > context). Each setting
// remembers where it came from, so errors and -v can name it.
type connSettings struct {
	context    string // context name, "" when none is used
	configPath string

	hub, hubFrom string

	tls                  bool
	ca, cert, key        string
	serverName           string
	caFrom, certFrom     string
	tlsFrom              string
	serverNameFrom       string
	token, tokenFrom     string // a literal token and its source
	tokenFile, tokFileBy string // a token file and the source that named it
	exec                 *ExecConfig
	execFrom             string
}

// hasCredentials reports whether a token of some kind will be sent.
func (s *connSettings) hasCredentials() bool {
	return s.token != "" || s.tokenFile != "" || s.exec != nil
}

// credentialSource names where the credentials come from, for messages;
// never the token itself.
func (s *connSettings) credentialSource() string {
	switch {
	case s.token != "":
		return s.tokenFrom
	case s.tokenFile != "":
		return fmt.Sprintf("token file %s (%s)", s.tokenFile, s.tokFileBy)
	case s.exec != nil:
		return fmt.Sprintf("exec plugin %s (%s)", s.exec.Command, s.execFrom)
	}
	return ""
}

// resolveSettings merges flags, environment and context. cmdFlags tells
// which flags the user set.
func (a *app) resolveSettings() (*connSettings, error) {
	if a.settings != nil {
		return a.settings, nil
	}
	s := &connSettings{}
	cf, err := a.loadConfig()
	if err != nil {
		return nil, err
	}
	s.configPath = cf.path
	var ctx *Context
	ctxName, ctxFrom := a.contextName, "--context"
	if ctxName == "" {
		ctxName, ctxFrom = a.env.Getenv(ContextEnv), "env "+ContextEnv
	}
	if ctxName == "" {
		ctxName, ctxFrom = cf.cfg.CurrentContext, "currentContext"
	}
	if ctxName != "" {
		ctx = cf.cfg.find(ctxName)
		if ctx == nil {
			where := cf.path
			if where == "" || !cf.exists {
				where = "the configuration (no file at " + dash(cf.path) + ")"
			}
			return nil, usageErrorf("%s: no context named %q in %s ('meridianctl config get-contexts' lists them)", ctxFrom, ctxName, where)
		}
		s.context = ctx.Name
	}
	inCtx := func(field string) string { return fmt.Sprintf("context %s, %s", s.context, field) }

	// Address.
	switch {
	case a.changed("hub"):
		s.hub, s.hubFrom = a.hub, "--hub"
	case a.env.Getenv(HubEnv) != "":
		s.hub, s.hubFrom = a.env.Getenv(HubEnv), "env "+HubEnv
	case ctx != nil && ctx.Hub != "":
		s.hub, s.hubFrom = ctx.Hub, inCtx("hub")
	default:
		s.hub, s.hubFrom = DefaultHub, "default"
	}

	// Transport security, field by field.
	pick := func(flagName, flagVal, ctxVal, field string) (string, string) {
		if a.changed(flagName) {
			return flagVal, "--" + flagName
		}
		if ctx != nil && ctxVal != "" {
			return a.resolvePath(cf, ctxVal), inCtx(field)
		}
		return "", ""
	}
	s.ca, s.caFrom = pick("ca", a.flags.ca, ctxField(ctx, func(c *Context) string { return c.CA }), "ca")
	s.cert, s.certFrom = pick("cert", a.flags.cert, ctxField(ctx, func(c *Context) string { return c.Cert }), "cert")
	var keyFrom string
	s.key, keyFrom = pick("key", a.flags.key, ctxField(ctx, func(c *Context) string { return c.Key }), "key")
	if a.changed("tls-server-name") {
		s.serverName, s.serverNameFrom = a.flags.serverName, "--tls-server-name"
	} else if ctx != nil && ctx.ServerName != "" {
		s.serverName, s.serverNameFrom = ctx.ServerName, inCtx("serverName")
	}
	switch {
	case a.changed("tls"):
		s.tls, s.tlsFrom = a.flags.tls, "--tls"
	case ctx != nil && ctx.TLS:
		s.tls, s.tlsFrom = true, inCtx("tls")
	}
	if s.ca != "" || s.cert != "" || s.key != "" {
		s.tls = true
		if s.tlsFrom == "" {
			s.tlsFrom = firstNonEmpty(s.caFrom, s.certFrom, keyFrom)
		}
	}
	if (s.cert == "") != (s.key == "") {
		return nil, usageErrorf("--cert and --key go together: a client certificate needs its key (cert from %s, key from %s)", dash(s.certFrom), dash(keyFrom))
	}
	if s.serverName != "" && !s.tls {
		return nil, usageErrorf("%s: a TLS server name needs TLS (add --tls or --ca)", s.serverNameFrom)
	}

	// Credentials: flags, then environment, then context.
	switch {
	case a.changed("token") && a.changed("token-file"):
		return nil, usageErrorf("--token and --token-file: give one of them")
	case a.changed("token"):
		if strings.TrimSpace(a.flags.token) == "" {
			return nil, usageErrorf("--token: must not be empty")
		}
		s.token, s.tokenFrom = strings.TrimSpace(a.flags.token), "--token"
	case a.changed("token-file"):
		if a.flags.tokenFile == "" {
			return nil, usageErrorf("--token-file: must not be empty")
		}
		s.tokenFile, s.tokFileBy = a.flags.tokenFile, "--token-file"
	case strings.TrimSpace(a.env.Getenv(TokenEnv)) != "":
		s.token, s.tokenFrom = strings.TrimSpace(a.env.Getenv(TokenEnv)), "env "+TokenEnv
	case ctx != nil && ctx.Token != "":
		s.token, s.tokenFrom = ctx.Token, inCtx("token")
	case ctx != nil && ctx.TokenFile != "":
		s.tokenFile, s.tokFileBy = a.resolvePath(cf, ctx.TokenFile), inCtx("tokenFile")
	case ctx != nil && !ctx.Exec.IsZero():
		e := ctx.Exec
		if strings.ContainsRune(e.Command, '/') {
			e.Command = a.resolvePath(cf, e.Command)
		}
		s.exec, s.execFrom = &e, inCtx("exec")
	}

	if strings.TrimSpace(s.hub) == "" {
		return nil, usageErrorf("%s: must not be empty (host:port of the hub's gRPC API)", s.hubFrom)
	}
	if strings.HasPrefix(s.hub, "http://") || strings.HasPrefix(s.hub, "https://") {
		return nil, usageErrorf("%s: %q is a URL; give host:port of the hub's gRPC API, for example %s", s.hubFrom, s.hub, DefaultHub)
	}
	if s.hasCredentials() && !s.tls && !isLoopback(s.hub) {
		return nil, usageErrorf("refusing to send the token from %s over plaintext to %s: it is not a loopback address; use TLS (--tls, or --ca with the hub's CA bundle, or tls: true in the context)", s.credentialSource(), s.hub)
	}
	a.settings = s
	a.hub = s.hub
	return s, nil
}

func ctxField(ctx *Context, f func(*Context) string) string {
	if ctx == nil {
		return ""
	}
	return f(ctx)
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// IsLoopback reports whether a gRPC target is on this machine: localhost,
// a loopback IP, or a unix socket. Other clients of the hub (the Terraform
// provider) apply the same rule before they send a token in plaintext.
func IsLoopback(target string) bool { return isLoopback(target) }

func isLoopback(target string) bool {
	if strings.HasPrefix(target, "unix:") || strings.HasPrefix(target, "unix-abstract:") {
		return true
	}
	t := target
	if i := strings.Index(t, ":///"); i >= 0 {
		t = t[i+4:]
	}
	host, _, err := net.SplitHostPort(t)
	if err != nil {
		host = strings.Trim(t, "[]")
	}
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// tlsConfig builds the client TLS configuration from the settings.
func (s *connSettings) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.serverName}
	if s.ca != "" {
		pem, err := os.ReadFile(s.ca)
		if err != nil {
			return nil, usageErrorf("%s: read CA bundle: %v", s.caFrom, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usageErrorf("%s: %s holds no PEM certificate", s.caFrom, s.ca)
		}
		cfg.RootCAs = pool
	}
	if s.cert != "" {
		pair, err := tls.LoadX509KeyPair(s.cert, s.key)
		if err != nil {
			return nil, usageErrorf("%s: load client certificate %s and key %s: %v", s.certFrom, s.cert, s.key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// describe says, for -v, how the hub is reached; never the token.
func (s *connSettings) describe() []string {
	var out []string
	if s.context != "" {
		out = append(out, fmt.Sprintf("context: %s (from %s)", s.context, s.configPath))
	}
	out = append(out, fmt.Sprintf("hub: %s (%s)", s.hub, s.hubFrom))
	if s.tls {
		t := "transport: TLS (" + s.tlsFrom + ")"
		if s.ca != "" {
			t += ", CA bundle " + s.ca
		} else {
			t += ", system roots"
		}
		if s.cert != "" {
			t += ", client certificate " + s.cert
		}
		if s.serverName != "" {
			t += ", server name " + s.serverName
		}
		out = append(out, t)
	} else {
		out = append(out, "transport: plaintext")
	}
	if src := s.credentialSource(); src != "" {
		out = append(out, "credentials: bearer token from "+src+" (not shown)")
	} else if s.cert != "" {
		out = append(out, "credentials: client certificate")
	} else {
		out = append(out, "credentials: none")
	}
	return out
}

// tokenSource yields the bearer token for a call.
type tokenSource interface {
	// Token returns the current token, running a plugin or reading a
	// file when needed.
	Token(ctx context.Context) (string, error)
	// Refresh forgets a cached token; it reports whether the next Token
	// may differ (false for a literal token).
	Refresh() bool
}

type staticToken string

func (t staticToken) Token(context.Context) (string, error) { return string(t), nil }
func (staticToken) Refresh() bool                           { return false }

// fileToken reads a token file on first use and again after Refresh.
type fileToken struct {
	path, from string
	mu         sync.Mutex
	tok        string
}

func (f *fileToken) Token(context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tok != "" {
		return f.tok, nil
	}
	data, err := os.ReadFile(f.path)
	if err != nil {
		return "", &exitError{code: ExitUsage, msg: fmt.Sprintf("%s: read token file: %v", f.from, err), err: err}
	}
	tok := strings.TrimSpace(string(data))
	if tok == "" || strings.ContainsAny(tok, "\r\n") {
		return "", &exitError{code: ExitUsage, msg: fmt.Sprintf("%s: token file %s must hold one token on one line", f.from, f.path)}
	}
	f.tok = tok
	return tok, nil
}

func (f *fileToken) Refresh() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tok = ""
	return true
}

// bearer is the gRPC per-RPC credential that sends the token as
// "authorization: Bearer <token>".
type bearer struct {
	src    tokenSource
	secure bool
}

var _ credentials.PerRPCCredentials = (*bearer)(nil)

// preparedTokenKey carries the token app.prepareToken fetched for a call.
type preparedTokenKey struct{}

func (b *bearer) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	if tok, ok := ctx.Value(preparedTokenKey{}).(string); ok && tok != "" {
		return map[string]string{"authorization": "Bearer " + tok}, nil
	}
	tok, err := b.src.Token(ctx)
	if err != nil {
		// app.call fetches the token first and reports this itself; here
		// only a terse status, never the token.
		return nil, status.Error(codes.Unauthenticated, "could not get a token: "+err.Error())
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

// RequireTransportSecurity is false only for the loopback plaintext case
// resolveSettings allowed.
func (b *bearer) RequireTransportSecurity() bool { return b.secure }

// tokenSourceFor builds the token source of the settings; nil when no
// token is sent.
func (a *app) tokenSourceFor(s *connSettings) tokenSource {
	switch {
	case s.token != "":
		return staticToken(s.token)
	case s.tokenFile != "":
		return &fileToken{path: s.tokenFile, from: s.tokFileBy}
	case s.exec != nil:
		return &execToken{cfg: *s.exec, from: s.execFrom, app: a}
	}
	return nil
}
