package ui

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"regexp"
	"strings"
	"testing"
)

func newServer(t *testing.T, o Options) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	if err := Mount(mux, o); err != nil {
		t.Fatal(err)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }) // the API's place
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, u string, hdr map[string]string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func assetNames(t *testing.T) []string {
	t.Helper()
	var names []string
	err := fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, strings.TrimPrefix(p, "assets/"))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 5 {
		t.Fatalf("only %d embedded assets: %v", len(names), names)
	}
	return names
}

func TestAssetsServedWithTypesAndCSP(t *testing.T) {
	srv := newServer(t, Options{})
	want := map[string]string{
		".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
		".css": "text/css; charset=utf-8", ".svg": "image/svg+xml",
	}
	for _, name := range append(assetNames(t), "", "callback") {
		resp := get(t, srv.URL+"/ui/"+name, nil)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("/ui/%s: %d", name, resp.StatusCode)
			continue
		}
		ext := path.Ext(name)
		if ext == "" {
			ext = ".html"
		}
		if got := resp.Header.Get("Content-Type"); got != want[ext] {
			t.Errorf("/ui/%s: Content-Type %q, want %q", name, got, want[ext])
		}
		if got := resp.Header.Get("Content-Security-Policy"); got != ContentSecurityPolicy {
			t.Errorf("/ui/%s: CSP %q", name, got)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("/ui/%s: security headers missing: %v", name, resp.Header)
		}
	}
	for _, bad := range []string{"/ui/nope.js", "/ui/js/../index.html", "/ui/.hidden"} {
		if resp := get(t, srv.URL+bad, nil); resp.StatusCode == http.StatusOK {
			t.Errorf("%s: 200, want an error", bad)
		}
	}
}

func TestCSPIsStrict(t *testing.T) {
	for _, banned := range []string{"unsafe-inline", "unsafe-eval", "http:", "https:", "*", "data: blob:"} {
		if strings.Contains(ContentSecurityPolicy, banned) {
			t.Errorf("CSP allows %q: %s", banned, ContentSecurityPolicy)
		}
	}
	for _, need := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "base-uri 'none'"} {
		if !strings.Contains(ContentSecurityPolicy, need) {
			t.Errorf("CSP lacks %q", need)
		}
	}
}

// TestNoExternalURLs: the dashboard downloads nothing at run time. No asset
// names another origin, and the HTML has no inline script or style (the
// CSP would block them anyway).
func TestNoExternalURLs(t *testing.T) {
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}|@import|(src|href)\s*=\s*["']//`)
	// An SVG's xmlns is a name, not a download.
	allowed := func(name, m string) bool { return strings.HasSuffix(name, ".svg") && m == "http://www.w3.org" }
	inline := regexp.MustCompile(`(?i)<script>|<script\s+(type="module"\s*)?>|\sstyle\s*=|\son[a-z]+\s*=|javascript:|<style`)
	for _, name := range assetNames(t) {
		b, err := fs.ReadFile(assets, "assets/"+name)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range external.FindAllString(string(b), -1) {
			if !allowed(name, m) {
				t.Errorf("%s names another origin: %q", name, m)
			}
		}
		if strings.HasSuffix(name, ".html") || strings.HasSuffix(name, ".svg") {
			if m := inline.FindString(string(b)); m != "" {
				t.Errorf("%s has inline code or style: %q", name, m)
			}
		}
		if strings.HasSuffix(name, ".js") && regexp.MustCompile(`\binnerHTML\b|\beval\(|new Function\(|insertAdjacentHTML|document\.write`).Match(b) {
			t.Errorf("%s builds markup from strings or evaluates code", name)
		}
	}
}

func TestRedirects(t *testing.T) {
	srv := newServer(t, Options{})
	if r := get(t, srv.URL+"/ui", nil); r.StatusCode != http.StatusMovedPermanently || r.Header.Get("Location") != "/ui/" {
		t.Errorf("/ui: %d %q", r.StatusCode, r.Header.Get("Location"))
	}
	if r := get(t, srv.URL+"/", map[string]string{"Accept": "text/html,application/xhtml+xml"}); r.StatusCode != http.StatusFound || r.Header.Get("Location") != "/ui/" {
		t.Errorf("/ for a browser: %d %q", r.StatusCode, r.Header.Get("Location"))
	}
	if r := get(t, srv.URL+"/", map[string]string{"Accept": "application/json"}); r.StatusCode != http.StatusNotFound {
		t.Errorf("/ for an API client: %d", r.StatusCode)
	}
}

// fakeIssuer is an OIDC issuer with discovery, an authorization endpoint
// and a token endpoint that checks PKCE (S256) as a real one does.
type fakeIssuer struct {
	srv       *httptest.Server
	challenge string // what /authorize was given
	code      string
}

func newFakeIssuer(t *testing.T) *fakeIssuer {
	f := &fakeIssuer{code: "code-123"}
	mux := http.NewServeMux()
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": f.srv.URL, "authorization_endpoint": f.srv.URL + "/authorize", "token_endpoint": f.srv.URL + "/token"})
	})
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		if r.PostForm.Get("code") != f.code || base64.RawURLEncoding.EncodeToString(sum[:]) != f.challenge ||
			r.PostForm.Get("client_id") != "meridian" || r.PostForm.Get("grant_type") != "authorization_code" {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "invalid_grant"})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"id_token": "header.payload.sig", "access_token": "secret-access", "refresh_token": "secret-refresh", "expires_in": 300})
	})
	return f
}

func TestOIDCConfigAndExchange(t *testing.T) {
	is := newFakeIssuer(t)
	srv := newServer(t, Options{Issuers: []Issuer{{IssuerURL: is.srv.URL, ClientID: "meridian"}}})
	resp := get(t, srv.URL+"/ui/config.json", nil)
	var cfg struct {
		Issuers []configIssuer `json:"issuers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Issuers) != 1 || cfg.Issuers[0].AuthorizationEndpoint != is.srv.URL+"/authorize" || cfg.Issuers[0].ClientID != "meridian" {
		t.Fatalf("config: %+v", cfg)
	}
	verifier := strings.Repeat("v", 50)
	sum := sha256.Sum256([]byte(verifier))
	is.challenge = base64.RawURLEncoding.EncodeToString(sum[:])
	post := func(body map[string]string, hdr map[string]string) (int, map[string]any) {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/ui/oidc/token", strings.NewReader(string(b)))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out map[string]any
		_ = json.Unmarshal(raw, &out)
		return resp.StatusCode, out
	}
	good := map[string]string{"issuer": is.srv.URL, "code": "code-123", "codeVerifier": verifier, "redirectUri": srv.URL + "/ui/callback"}
	code, out := post(good, map[string]string{"Origin": srv.URL})
	if code != http.StatusOK || out["idToken"] != "header.payload.sig" {
		t.Fatalf("exchange: %d %v", code, out)
	}
	if _, leaked := out["accessToken"]; leaked || strings.Contains(func() string { b, _ := json.Marshal(out); return string(b) }(), "secret-") {
		t.Errorf("the exchange passed on more than the ID token: %v", out)
	}
	cases := map[string]struct {
		body map[string]string
		hdr  map[string]string
		want int
	}{
		"wrong verifier":    {body: with(good, "codeVerifier", strings.Repeat("x", 50)), want: http.StatusBadRequest},
		"unknown issuer":    {body: with(good, "issuer", "https://evil.example"), want: http.StatusBadRequest},
		"foreign redirect":  {body: with(good, "redirectUri", "https://evil.example/ui/callback"), want: http.StatusBadRequest},
		"cross-site origin": {body: good, hdr: map[string]string{"Origin": "https://evil.example"}, want: http.StatusForbidden},
		"form post":         {body: good, hdr: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, want: http.StatusUnsupportedMediaType},
	}
	for name, c := range cases {
		if code, out := post(c.body, c.hdr); code != c.want {
			t.Errorf("%s: %d %v, want %d", name, code, out, c.want)
		}
	}
	// The authorization URL the page builds points at the issuer.
	u, _ := url.Parse(cfg.Issuers[0].AuthorizationEndpoint)
	if u.Host != strings.TrimPrefix(is.srv.URL, "http://") {
		t.Errorf("authorization endpoint %s", u)
	}
}

func with(m map[string]string, k, v string) map[string]string {
	out := map[string]string{}
	for a, b := range m {
		out[a] = b
	}
	out[k] = v
	return out
}

// TestModulesPreloaded: index.html preloads every module main.js imports,
// so the browser fetches them with main.js instead of after it (one round
// trip less before the first view's requests).
func TestModulesPreloaded(t *testing.T) {
	html, err := fs.ReadFile(assets, "assets/index.html")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range assetNames(t) {
		if !strings.HasPrefix(name, "js/") || name == "js/main.js" {
			continue
		}
		if !strings.Contains(string(html), `<link rel="modulepreload" href="`+name+`">`) {
			t.Errorf("index.html does not preload %s", name)
		}
	}
}
