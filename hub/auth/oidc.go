package auth

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
)

// Defaults of IssuerConfig and OIDCOptions.
const (
	DefaultUsernameClaim    = "sub"
	DefaultGroupsClaim      = "groups"
	DefaultOIDCCacheSize    = 4096
	DefaultLeeway           = time.Minute
	DefaultDiscoveryTimeout = 10 * time.Second
	DefaultRetryMin         = time.Second
	DefaultRetryMax         = 30 * time.Second
)

// DefaultSigningAlgs are the algorithms accepted when IssuerConfig does
// not name any: asymmetric only. HS* and "none" are never accepted.
var DefaultSigningAlgs = []string{"RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512", "EdDSA"}

// IssuerConfig is one trusted OIDC issuer.
type IssuerConfig struct {
	// IssuerURL is the issuer, exactly as in its tokens' "iss" claim and
	// its discovery document; https only.
	IssuerURL string
	// Audience is the client id the tokens must be issued to ("aud").
	Audience string
	// UsernameClaim names the claim that holds the user name; default
	// "sub". With "email", a present "email_verified" must be true.
	UsernameClaim string
	// GroupsClaim names the claim that holds the groups (a string or an
	// array of strings); default "groups". A token without it has no groups.
	GroupsClaim string
	// UsernamePrefix and GroupsPrefix are put before the user name and each
	// group, like kube-apiserver's --oidc-username-prefix ("oidc:"). With
	// several issuers, give each its own prefix unless their user names
	// cannot collide (e-mail addresses of one organization, say).
	UsernamePrefix, GroupsPrefix string
	// CAFile is a PEM bundle to trust for the issuer's TLS instead of the
	// system roots.
	CAFile string
	// RootCAs, when set, is used instead of CAFile (embedding and tests).
	RootCAs *x509.CertPool
	// SigningAlgs restricts the accepted algorithms; default
	// DefaultSigningAlgs. Symmetric algorithms and "none" are refused.
	SigningAlgs []string
}

// OIDCOptions configure OIDC bearer-token authentication.
type OIDCOptions struct {
	// Issuers are the trusted issuers; at least one, each URL once.
	Issuers []IssuerConfig
	// CacheSize bounds the verified-token cache (entries); default
	// DefaultOIDCCacheSize.
	CacheSize int
	// Leeway is the clock skew allowed for "iat" and "nbf" in the future;
	// default DefaultLeeway. ("exp" is exact.)
	Leeway time.Duration
	// DiscoveryTimeout bounds one discovery attempt; default
	// DefaultDiscoveryTimeout. It also bounds each fetch of an issuer's keys.
	DiscoveryTimeout time.Duration
	// RetryMin and RetryMax bound the backoff between failed discovery
	// attempts; requests in between fail fast with ErrUnavailable.
	RetryMin, RetryMax time.Duration
	// KeyRefreshMinInterval is the least time between two fetches of an
	// issuer's keys caused by a token they do not verify (a new key id after
	// rotation, or a forgery); default DefaultKeyRefreshMinInterval.
	KeyRefreshMinInterval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives discovery failures and recoveries; nil drops them.
	Logger *slog.Logger

	// wrapKeySet, for tests, wraps each issuer's key set once discovered.
	wrapKeySet func(oidc.KeySet) oidc.KeySet
}

// OIDC authenticates OIDC bearer tokens (JWTs) from trusted issuers. It
// does no network I/O until the first token of an issuer arrives (or Warm
// is called): a hub starts even when an issuer is unreachable, and requests
// then fail with ErrUnavailable naming the issuer until discovery succeeds.
//
// A verified token's principal is cached, keyed by the token's SHA-256,
// until the token expires (at most CacheSize entries, least recently used
// evicted), so a busy client costs one signature check per token, not one
// per call. Discovery and claim checks are go-oidc's; the issuer's keys are
// fetched again when a token does not verify with the known ones (a new key
// id after rotation), at most once per KeyRefreshMinInterval, so issuer key
// rotation needs no restart and forged tokens cannot make the hub hammer
// the issuer.
type OIDC struct {
	issuers map[string]*issuer
	cache   *lru[oidcEntry]
	now     func() time.Time
	leeway  time.Duration
	log     *slog.Logger
	cancel  context.CancelFunc
}

var _ Authenticator = (*OIDC)(nil)

type oidcEntry struct {
	p   *Principal
	exp time.Time
}

// NewOIDC checks opts and returns the method. It reads CA files but does
// no network I/O.
func NewOIDC(opts OIDCOptions) (*OIDC, error) {
	if len(opts.Issuers) == 0 {
		return nil, errors.New("auth: OIDC needs at least one issuer")
	}
	if opts.CacheSize == 0 {
		opts.CacheSize = DefaultOIDCCacheSize
	}
	if opts.Leeway == 0 {
		opts.Leeway = DefaultLeeway
	}
	if opts.DiscoveryTimeout == 0 {
		opts.DiscoveryTimeout = DefaultDiscoveryTimeout
	}
	if opts.RetryMin == 0 {
		opts.RetryMin = DefaultRetryMin
	}
	if opts.RetryMax == 0 {
		opts.RetryMax = DefaultRetryMax
	}
	if opts.KeyRefreshMinInterval == 0 {
		opts.KeyRefreshMinInterval = DefaultKeyRefreshMinInterval
	}
	switch {
	case opts.CacheSize < 0:
		return nil, fmt.Errorf("auth: OIDC CacheSize %d is negative", opts.CacheSize)
	case opts.Leeway < 0, opts.DiscoveryTimeout < 0, opts.KeyRefreshMinInterval < 0, opts.RetryMin < 0, opts.RetryMax < opts.RetryMin:
		return nil, errors.New("auth: OIDC durations must be positive and RetryMax at least RetryMin")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	base, cancel := context.WithCancel(context.Background())
	o := &OIDC{
		issuers: make(map[string]*issuer, len(opts.Issuers)),
		cache:   newLRU[oidcEntry](opts.CacheSize),
		now:     nowFunc(opts.Now),
		leeway:  opts.Leeway,
		log:     log,
		cancel:  cancel,
	}
	for i, ic := range opts.Issuers {
		is, err := newIssuer(base, ic, &opts, o.now, log)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("auth: OIDC issuer %d: %w", i, err)
		}
		if _, dup := o.issuers[is.cfg.IssuerURL]; dup {
			cancel()
			return nil, fmt.Errorf("auth: OIDC issuer %d: %s configured twice", i, is.cfg.IssuerURL)
		}
		o.issuers[is.cfg.IssuerURL] = is
	}
	return o, nil
}

// Close stops background key fetches. Authenticate must not be called after.
func (o *OIDC) Close() { o.cancel() }

// Warm runs discovery for every issuer not yet discovered, waiting at most
// until ctx is done, and returns the failures joined. The hub may call it in
// the background at start to make the first request cheaper; it is never
// required.
func (o *OIDC) Warm(ctx context.Context) error {
	var errs []error
	for _, is := range o.issuers {
		if _, err := is.verifier(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Authenticate implements Authenticator. It applies to a bearer token that
// looks like a JWT (three dot-separated parts) and is not an API token.
func (o *OIDC) Authenticate(ctx context.Context, cr Credentials) (*Principal, error) {
	tok, err := cr.BearerToken()
	if err != nil {
		if IsNoCredentials(err) {
			return nil, errNotApplicable
		}
		return nil, err
	}
	if strings.HasPrefix(tok, TokenPrefix) || strings.Count(tok, ".") != 2 {
		return nil, errNotApplicable
	}
	key := sha256.Sum256([]byte(tok))
	now := o.now()
	if e, ok := o.cache.get(key); ok {
		if now.Before(e.exp) {
			return e.p.Clone(), nil
		}
		o.cache.remove(key)
	}
	iss, err := unverifiedIssuer(tok)
	if err != nil {
		return nil, unauth(MethodOIDC, "malformed token", "cannot read the token's issuer", err)
	}
	is := o.issuers[iss]
	if is == nil {
		return nil, unauth(MethodOIDC, "token issuer is not trusted", fmt.Sprintf("issuer %q is not configured", clip(iss, 200)), nil)
	}
	v, err := is.verifier(ctx)
	if err != nil {
		return nil, err
	}
	idt, err := v.Verify(ctx, tok)
	if err != nil {
		var exp *oidc.TokenExpiredError
		if errors.As(err, &exp) {
			return nil, unauth(MethodOIDC, "token expired", fmt.Sprintf("issuer %s: expired at %s", iss, exp.Expiry.UTC().Format(time.RFC3339)), err)
		}
		if ctx.Err() != nil {
			return nil, unavailable(MethodOIDC, "request ended while checking the token", "issuer "+iss, ctx.Err())
		}
		return nil, unauth(MethodOIDC, "invalid token", "issuer "+iss+": verification failed", err)
	}
	p, err := is.principal(idt, now, o.leeway)
	if err != nil {
		return nil, err
	}
	o.cache.add(key, oidcEntry{p: p, exp: idt.Expiry})
	return p.Clone(), nil
}

// unverifiedIssuer reads "iss" from a JWT's payload without checking
// anything; it only picks which issuer's verifier to use.
func unverifiedIssuer(tok string) (string, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "", errors.New("not three parts")
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", fmt.Errorf("payload is not base64url: %w", err)
	}
	var c struct {
		Iss string `json:"iss"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return "", errors.New("payload is not a JSON object with a string iss")
	}
	if c.Iss == "" {
		return "", errors.New("no iss claim")
	}
	return c.Iss, nil
}

// issuer is one configured issuer and its lazily discovered verifier.
type issuer struct {
	cfg    IssuerConfig
	client *http.Client
	base   context.Context
	opts   *OIDCOptions
	now    func() time.Time
	log    *slog.Logger

	mu       sync.Mutex
	v        *oidc.IDTokenVerifier
	inflight chan struct{} // closed when the running attempt ends
	lastErr  error
	nextTry  time.Time
	backoff  time.Duration
}

func newIssuer(base context.Context, ic IssuerConfig, opts *OIDCOptions, now func() time.Time, log *slog.Logger) (*issuer, error) {
	u, err := url.Parse(ic.IssuerURL)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("IssuerURL %q must be an https URL without query or fragment", ic.IssuerURL)
	}
	if ic.Audience == "" {
		return nil, fmt.Errorf("issuer %s: Audience (the client id) is required", ic.IssuerURL)
	}
	if ic.UsernameClaim == "" {
		ic.UsernameClaim = DefaultUsernameClaim
	}
	if ic.GroupsClaim == "" {
		ic.GroupsClaim = DefaultGroupsClaim
	}
	if len(ic.SigningAlgs) == 0 {
		ic.SigningAlgs = DefaultSigningAlgs
	}
	for _, a := range ic.SigningAlgs {
		if !slices.Contains(DefaultSigningAlgs, a) {
			return nil, fmt.Errorf("issuer %s: signing algorithm %q is not allowed (asymmetric algorithms only)", ic.IssuerURL, a)
		}
	}
	ic.SigningAlgs = slices.Clone(ic.SigningAlgs)
	pool := ic.RootCAs
	if pool == nil && ic.CAFile != "" {
		pem, err := os.ReadFile(ic.CAFile)
		if err != nil {
			return nil, fmt.Errorf("issuer %s: read CA file: %w", ic.IssuerURL, err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("issuer %s: CA file %s holds no PEM certificate", ic.IssuerURL, ic.CAFile)
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &issuer{
		cfg:    ic,
		client: &http.Client{Transport: tr, Timeout: opts.DiscoveryTimeout},
		base:   base,
		opts:   opts,
		now:    now,
		log:    log.With("issuer", ic.IssuerURL),
	}, nil
}

// verifier returns the issuer's verifier, running discovery if needed. One
// attempt runs at a time; callers wait for it at most until ctx is done.
// After a failure, callers fail fast until the backoff has passed.
func (is *issuer) verifier(ctx context.Context) (*oidc.IDTokenVerifier, error) {
	is.mu.Lock()
	if is.v != nil {
		v := is.v
		is.mu.Unlock()
		return v, nil
	}
	if is.inflight == nil {
		if is.lastErr != nil && is.now().Before(is.nextTry) {
			err := is.lastErr
			is.mu.Unlock()
			return nil, is.unavailableErr(err)
		}
		ch := make(chan struct{})
		is.inflight = ch
		go is.discover(ch)
	}
	ch := is.inflight
	is.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
		return nil, unavailable(MethodOIDC, "identity provider not ready", "issuer "+is.cfg.IssuerURL+": discovery still running", ctx.Err())
	}
	is.mu.Lock()
	defer is.mu.Unlock()
	if is.v != nil {
		return is.v, nil
	}
	return nil, is.unavailableErr(is.lastErr)
}

func (is *issuer) unavailableErr(err error) error {
	return unavailable(MethodOIDC, "identity provider unreachable", "issuer "+is.cfg.IssuerURL+": discovery failed", err)
}

// discover runs one discovery attempt and records its outcome.
func (is *issuer) discover(done chan struct{}) {
	ctx, cancel := context.WithTimeout(is.base, is.opts.DiscoveryTimeout)
	v, err := is.newVerifier(ctx)
	cancel()
	is.mu.Lock()
	defer is.mu.Unlock()
	defer close(done)
	is.inflight = nil
	if err != nil {
		is.backoff = min(max(is.backoff*2, is.opts.RetryMin), is.opts.RetryMax)
		is.nextTry = is.now().Add(is.backoff)
		is.lastErr = err
		is.log.Warn("OIDC discovery failed", "err", err, "retry_in", is.backoff)
		return
	}
	if is.lastErr != nil {
		is.log.Info("OIDC discovery succeeded after failures")
	}
	is.v, is.lastErr, is.backoff = v, nil, 0
}

func (is *issuer) newVerifier(ctx context.Context) (*oidc.IDTokenVerifier, error) {
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, is.client), is.cfg.IssuerURL)
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	var meta struct {
		JWKSURL string `json:"jwks_uri"`
	}
	if err := p.Claims(&meta); err != nil {
		return nil, fmt.Errorf("discovery document: %w", err)
	}
	if u, err := url.Parse(meta.JWKSURL); err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("discovery document: jwks_uri %q is not an https URL", clip(meta.JWKSURL, 200))
	}
	algs := make([]jose.SignatureAlgorithm, len(is.cfg.SigningAlgs))
	for i, a := range is.cfg.SigningAlgs {
		algs[i] = jose.SignatureAlgorithm(a)
	}
	var ks oidc.KeySet = &remoteKeys{url: meta.JWKSURL, client: is.client, base: is.base, algs: algs,
		minRefresh: is.opts.KeyRefreshMinInterval, now: is.now}
	if is.opts.wrapKeySet != nil {
		ks = is.opts.wrapKeySet(ks)
	}
	return oidc.NewVerifier(is.cfg.IssuerURL, ks, &oidc.Config{
		ClientID:             is.cfg.Audience,
		SupportedSigningAlgs: is.cfg.SigningAlgs,
		Now:                  is.now,
	}), nil
}

// principal maps a verified token's claims to a Principal, after the
// checks go-oidc leaves to its caller: "iat" and "nbf" not in the future
// beyond leeway, the user name claim a non-empty string, email verified.
func (is *issuer) principal(idt *oidc.IDToken, now time.Time, leeway time.Duration) (*Principal, error) {
	var claims map[string]json.RawMessage
	if err := idt.Claims(&claims); err != nil {
		return nil, unauth(MethodOIDC, "invalid token", "issuer "+is.cfg.IssuerURL+": claims are not a JSON object", err)
	}
	bad := func(reason, detail string) error {
		return unauth(MethodOIDC, reason, "issuer "+is.cfg.IssuerURL+": "+detail, nil)
	}
	for _, name := range []string{"iat", "nbf"} {
		raw, ok := claims[name]
		if !ok {
			continue
		}
		var secs float64
		if err := json.Unmarshal(raw, &secs); err != nil {
			return nil, bad("invalid token", name+" is not a number")
		}
		if t := time.Unix(int64(secs), 0); t.After(now.Add(leeway)) {
			return nil, bad("token not yet valid", fmt.Sprintf("%s %s is in the future beyond the %s leeway", name, t.UTC().Format(time.RFC3339), leeway))
		}
	}
	var user string
	if raw, ok := claims[is.cfg.UsernameClaim]; !ok || json.Unmarshal(raw, &user) != nil || user == "" {
		return nil, bad("token has no user name", "claim "+is.cfg.UsernameClaim+" missing, empty or not a string")
	}
	if !printable(user) {
		return nil, bad("token has no user name", "claim "+is.cfg.UsernameClaim+" has control characters")
	}
	if is.cfg.UsernameClaim == "email" {
		if raw, ok := claims["email_verified"]; ok {
			var verified bool
			if json.Unmarshal(raw, &verified) != nil || !verified {
				return nil, bad("e-mail address not verified", "email_verified is not true")
			}
		}
	}
	p := &Principal{
		User:      is.cfg.UsernamePrefix + user,
		Method:    MethodOIDC,
		Issuer:    is.cfg.IssuerURL,
		Subject:   idt.Subject,
		ExpiresAt: idt.Expiry,
	}
	if raw, ok := claims[is.cfg.GroupsClaim]; ok && string(raw) != "null" {
		var groups []string
		if err := json.Unmarshal(raw, &groups); err != nil {
			var one string
			if json.Unmarshal(raw, &one) != nil {
				return nil, bad("invalid token", "claim "+is.cfg.GroupsClaim+" is neither a string nor an array of strings")
			}
			groups = []string{one}
		}
		for _, g := range groups {
			if g != "" && printable(g) {
				p.Groups = append(p.Groups, is.cfg.GroupsPrefix+g)
			}
		}
	}
	return p, nil
}

// clip shortens s to at most n bytes for an error message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
