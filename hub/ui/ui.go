package ui

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/meridian-gpu/meridian/hub/auth"
)

//go:embed assets
var assets embed.FS

// Prefix is where the dashboard is mounted on the hub's HTTP mux.
const Prefix = "/ui/"

// ContentSecurityPolicy is sent with every response of the dashboard. Every
// asset is local: scripts and styles only from the hub itself (no inline
// script, no eval), API calls only to the hub, no frames, no plugins.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Issuer is an OIDC issuer the dashboard may sign users in with. It is the
// same issuer the hub accepts ID tokens from (auth.oidc.issuers): the
// dashboard is a public client of it (authorization code with PKCE, no
// client secret) whose client id is the issuer's audience.
type Issuer struct {
	// IssuerURL is the issuer, equal to its tokens' iss.
	IssuerURL string
	// ClientID is the OAuth client id, the hub's audience for the issuer.
	ClientID string
	// CAFile verifies the issuer's TLS certificate; empty means the system
	// roots.
	CAFile string
	// Scopes asked for; empty means "openid email groups".
	Scopes []string
	// HTTPClient, when set, replaces the client built from CAFile (tests).
	HTTPClient *http.Client
}

// Options configure the handler.
type Options struct {
	// Issuers offered on the login page; none means token login only.
	Issuers []Issuer
	// Logger receives problems reaching an issuer; nil drops them.
	Logger *slog.Logger
}

// Handler serves the dashboard under Prefix.
type Handler struct {
	opts    Options
	log     *slog.Logger
	static  fs.FS
	mu      sync.Mutex
	discovs map[string]*discovery // by issuer URL
}

// New returns the dashboard's handler. Mount it at Prefix, and send the
// bare prefix ("/ui") to it too (it redirects).
func New(o Options) (*Handler, error) {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	for i, is := range o.Issuers {
		u, err := url.Parse(is.IssuerURL)
		if err != nil || u.Scheme != "https" && u.Hostname() != "127.0.0.1" && u.Hostname() != "localhost" {
			return nil, fmt.Errorf("ui: issuer %d: %q is not an https URL", i, is.IssuerURL)
		}
		if is.ClientID == "" {
			return nil, fmt.Errorf("ui: issuer %s: a client id (the hub's audience) is required", is.IssuerURL)
		}
	}
	l := o.Logger
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return &Handler{opts: o, log: l, static: sub, discovs: map[string]*discovery{}}, nil
}

// securityHeaders are set on every response.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
}

// ServeHTTP serves the dashboard.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header())
	p := r.URL.Path
	if p == strings.TrimSuffix(Prefix, "/") {
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
		return
	}
	rest, ok := strings.CutPrefix(p, Prefix)
	if !ok {
		http.NotFound(w, r)
		return
	}
	switch rest {
	case "config.json":
		h.serveConfig(w, r)
		return
	case "oidc/token":
		h.serveExchange(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if rest == "" || rest == "index.html" || rest == "callback" {
		// The OIDC redirect URI (callback) is the page itself.
		h.serveFile(w, r, "index.html")
		return
	}
	clean := path.Clean(rest)
	if clean != rest || strings.HasPrefix(clean, ".") {
		http.NotFound(w, r)
		return
	}
	h.serveFile(w, r, clean)
}

func (h *Handler) serveFile(w http.ResponseWriter, r *http.Request, name string) {
	b, err := fs.ReadFile(h.static, name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	ct := mime.TypeByExtension(path.Ext(name))
	switch path.Ext(name) {
	case ".js":
		ct = "text/javascript; charset=utf-8"
	case ".css":
		ct = "text/css; charset=utf-8"
	case ".html":
		ct = "text/html; charset=utf-8"
	case ".svg":
		ct = "image/svg+xml"
	}
	if ct == "" {
		ct = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ct)
	// The assets change only with the hub binary; revalidate each load so
	// an upgraded hub never serves a page with stale modules.
	w.Header().Set("Cache-Control", "no-cache")
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(b)
}

// configIssuer is one sign-in option as the browser sees it.
type configIssuer struct {
	Issuer                string   `json:"issuer"`
	ClientID              string   `json:"clientId"`
	AuthorizationEndpoint string   `json:"authorizationEndpoint,omitempty"`
	Scopes                []string `json:"scopes"`
	Error                 string   `json:"error,omitempty"`
}

func (h *Handler) serveConfig(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	out := struct {
		Issuers []configIssuer `json:"issuers"`
	}{Issuers: []configIssuer{}}
	for i := range h.opts.Issuers {
		is := &h.opts.Issuers[i]
		ci := configIssuer{Issuer: is.IssuerURL, ClientID: is.ClientID, Scopes: scopes(is)}
		d, err := h.discover(r.Context(), is)
		if err != nil {
			h.log.Warn("dashboard: OIDC discovery failed", "issuer", is.IssuerURL, "err", err)
			ci.Error = "the sign-in provider cannot be reached now"
		} else {
			ci.AuthorizationEndpoint = d.AuthorizationEndpoint
		}
		out.Issuers = append(out.Issuers, ci)
	}
	writeJSON(w, http.StatusOK, out)
}

func scopes(is *Issuer) []string {
	if len(is.Scopes) > 0 {
		return is.Scopes
	}
	return []string{"openid", "email", "groups"}
}

// discovery is the part of an issuer's discovery document the dashboard
// uses.
type discovery struct {
	Issuer                string `json:"issuer"`
	AuthorizationEndpoint string `json:"authorization_endpoint"`
	TokenEndpoint         string `json:"token_endpoint"`
	fetched               time.Time
}

func (h *Handler) client(is *Issuer) (*http.Client, error) {
	if is.HTTPClient != nil {
		return is.HTTPClient, nil
	}
	if is.CAFile == "" {
		return &http.Client{Timeout: 10 * time.Second}, nil
	}
	pem, err := os.ReadFile(is.CAFile)
	if err != nil {
		return nil, fmt.Errorf("issuer CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("issuer CA: no certificate in the file")
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}, nil
}

// discover fetches (and keeps for 10 minutes) an issuer's discovery
// document.
func (h *Handler) discover(ctx context.Context, is *Issuer) (*discovery, error) {
	h.mu.Lock()
	d := h.discovs[is.IssuerURL]
	h.mu.Unlock()
	if d != nil && time.Since(d.fetched) < 10*time.Minute {
		return d, nil
	}
	c, err := h.client(is)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(is.IssuerURL, "/")+"/.well-known/openid-configuration", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("discovery: HTTP %d", resp.StatusCode)
	}
	d = &discovery{}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(d); err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	if d.Issuer != is.IssuerURL {
		return nil, fmt.Errorf("discovery: issuer %q does not match %q", d.Issuer, is.IssuerURL)
	}
	for _, e := range []string{d.AuthorizationEndpoint, d.TokenEndpoint} {
		if u, err := url.Parse(e); err != nil || u.Scheme != "https" && u.Scheme != "http" || u.Host == "" {
			return nil, fmt.Errorf("discovery: endpoint %q is not a URL", e)
		}
	}
	d.fetched = time.Now()
	h.mu.Lock()
	h.discovs[is.IssuerURL] = d
	h.mu.Unlock()
	return d, nil
}

// exchangeRequest is what the browser posts to oidc/token.
type exchangeRequest struct {
	Issuer       string `json:"issuer"`
	Code         string `json:"code"`
	CodeVerifier string `json:"codeVerifier"`
	RedirectURI  string `json:"redirectUri"`
}

// serveExchange forwards the browser's authorization code and PKCE
// verifier to the issuer's token endpoint and returns the ID token to the
// browser. The hub adds nothing of its own: no client secret, no session;
// the code is useless without the verifier, which only the browser holds.
func (h *Handler) serveExchange(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	// A cross-site form cannot send JSON; requiring it (and a same-origin
	// Origin when the browser sends one) keeps other sites from driving
	// the exchange.
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/json" {
		writeJSON(w, http.StatusUnsupportedMediaType, map[string]string{"error": "send application/json"})
		return
	}
	if o := r.Header.Get("Origin"); o != "" {
		if u, err := url.Parse(o); err != nil || u.Host != r.Host {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "cross-origin request refused"})
			return
		}
	}
	var req exchangeRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 16<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad request body: " + err.Error()})
		return
	}
	var is *Issuer
	for i := range h.opts.Issuers {
		if h.opts.Issuers[i].IssuerURL == req.Issuer {
			is = &h.opts.Issuers[i]
		}
	}
	if is == nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "issuer: not one the hub is configured with"})
		return
	}
	if req.Code == "" || len(req.CodeVerifier) < 43 || len(req.CodeVerifier) > 128 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "code and a 43-128 character codeVerifier are required"})
		return
	}
	if u, err := url.Parse(req.RedirectURI); err != nil || u.Host != r.Host || u.Path != Prefix+"callback" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "redirectUri must be this dashboard's " + Prefix + "callback"})
		return
	}
	d, err := h.discover(r.Context(), is)
	if err != nil {
		h.log.Warn("dashboard: OIDC discovery failed", "issuer", is.IssuerURL, "err", err)
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": "the sign-in provider cannot be reached now"})
		return
	}
	c, err := h.client(is)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "the hub cannot reach the sign-in provider"})
		return
	}
	form := url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {req.Code},
		"code_verifier": {req.CodeVerifier},
		"redirect_uri":  {req.RedirectURI},
		"client_id":     {is.ClientID},
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	treq, err := http.NewRequestWithContext(ctx, http.MethodPost, d.TokenEndpoint, strings.NewReader(form.Encode()))
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "bad token endpoint"})
		return
	}
	treq.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	treq.Header.Set("Accept", "application/json")
	resp, err := c.Do(treq)
	if err != nil {
		h.log.Warn("dashboard: OIDC token exchange failed", "issuer", is.IssuerURL, "err", err)
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": "the sign-in provider cannot be reached now"})
		return
	}
	defer resp.Body.Close()
	var tr struct {
		IDToken   string `json:"id_token"`
		ExpiresIn int64  `json:"expires_in"`
		Error     string `json:"error"`
		ErrorDesc string `json:"error_description"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&tr); err != nil || resp.StatusCode != http.StatusOK || tr.IDToken == "" {
		msg := "the sign-in provider refused the code"
		if tr.Error != "" {
			msg += ": " + tr.Error
			if tr.ErrorDesc != "" {
				msg += " (" + tr.ErrorDesc + ")"
			}
		}
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": msg})
		return
	}
	// Only the ID token goes back: it is what the hub verifies. Access and
	// refresh tokens are dropped here and never reach the page.
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"idToken": tr.IDToken, "expiresIn": tr.ExpiresIn})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Mount registers the dashboard on mux: Prefix and the bare prefix, and
// "GET /" (exactly) redirecting browsers to it.
func Mount(mux *http.ServeMux, o Options) error {
	h, err := New(o)
	if err != nil {
		return err
	}
	mux.Handle(Prefix, h)
	mux.Handle(strings.TrimSuffix(Prefix, "/"), h)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("Accept"), "text/html") {
			http.NotFound(w, r)
			return
		}
		http.Redirect(w, r, Prefix, http.StatusFound)
	})
	return nil
}

// FromAuth makes the dashboard's sign-in options from the hub's trusted
// OIDC issuers: each issuer's audience is the dashboard's client id.
func FromAuth(cfgs []auth.IssuerConfig) []Issuer {
	out := make([]Issuer, 0, len(cfgs))
	for _, c := range cfgs {
		is := Issuer{IssuerURL: c.IssuerURL, ClientID: c.Audience, CAFile: c.CAFile}
		if c.RootCAs != nil {
			is.HTTPClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: c.RootCAs, MinVersion: tls.VersionTLS12}}}
		}
		out = append(out, is)
	}
	return out
}
