package testoidc

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/meridian-gpu/meridian/internal/testpki"
)

// Algorithms the issuer signs with.
const (
	RS256 = jose.RS256
	ES256 = jose.ES256
)

// Issuer is a running test OIDC issuer. Its methods are safe for
// concurrent use.
type Issuer struct {
	// URL is the issuer URL, https://127.0.0.1:<port>, as in "iss".
	URL string
	// CAPool and CAFile are the CA that signed the server certificate.
	CAPool *x509.CertPool
	CAFile string

	srv *httptest.Server

	mu     sync.Mutex
	keys   []*key // keys published in the JWKS; keys[0] signs
	seq    int
	down   bool
	jwks   atomic.Int64
	discov atomic.Int64
}

type key struct {
	kid  string
	alg  jose.SignatureAlgorithm
	priv crypto.Signer
}

// New starts an issuer signing with RS256; Close runs at test cleanup.
func New(t testing.TB) *Issuer { return NewWithAlg(t, RS256) }

// NewWithAlg starts an issuer signing with alg (RS256 or ES256).
func NewWithAlg(t testing.TB, alg jose.SignatureAlgorithm) *Issuer {
	t.Helper()
	pki := testpki.New(t)
	i := &Issuer{CAPool: pki.Pool, CAFile: pki.CAFile}
	i.keys = []*key{i.newKey(t, alg)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", i.serveDiscovery)
	mux.HandleFunc("GET /keys", i.serveJWKS)
	i.srv = httptest.NewUnstartedServer(mux)
	i.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // handshakes a test refuses on purpose
	i.srv.TLS = &tls.Config{Certificates: []tls.Certificate{pki.Server}, MinVersion: tls.VersionTLS12}
	i.srv.StartTLS()
	i.URL = i.srv.URL
	t.Cleanup(i.Close)
	return i
}

// Close stops the server; later requests to it are refused.
func (i *Issuer) Close() { i.srv.Close() }

// SetDown makes every endpoint answer 503 (true) or serve again (false).
func (i *Issuer) SetDown(down bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.down = down
}

// JWKSHits and DiscoveryHits count requests served on each endpoint.
func (i *Issuer) JWKSHits() int64      { return i.jwks.Load() }
func (i *Issuer) DiscoveryHits() int64 { return i.discov.Load() }

func (i *Issuer) newKey(t testing.TB, alg jose.SignatureAlgorithm) *key {
	t.Helper()
	var (
		priv crypto.Signer
		err  error
	)
	switch alg {
	case RS256:
		priv, err = rsa.GenerateKey(rand.Reader, 2048)
	case ES256:
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	default:
		t.Fatalf("testoidc: unsupported algorithm %s", alg)
	}
	if err != nil {
		t.Fatal(err)
	}
	i.seq++
	return &key{kid: fmt.Sprintf("key-%d", i.seq), alg: alg, priv: priv}
}

// Rotate replaces the signing key with a new one of alg (the current
// algorithm when alg is ""): the old key disappears from the JWKS at once.
// It returns the new key id.
func (i *Issuer) Rotate(t testing.TB, alg jose.SignatureAlgorithm) string {
	t.Helper()
	i.mu.Lock()
	defer i.mu.Unlock()
	if alg == "" {
		alg = i.keys[0].alg
	}
	k := i.newKey(t, alg)
	i.keys = []*key{k}
	return k.kid
}

// KeyID is the id of the current signing key.
func (i *Issuer) KeyID() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.keys[0].kid
}

// PublicKeyPEM is the current signing key's public key, PEM (PKIX): what an
// attacker would use as an HMAC secret in an algorithm-confusion attack.
func (i *Issuer) PublicKeyPEM(t testing.TB) []byte {
	t.Helper()
	i.mu.Lock()
	defer i.mu.Unlock()
	der, err := x509.MarshalPKIXPublicKey(i.keys[0].priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// Claims returns the claims of a valid token for audience aud and subject
// sub: iss, sub, aud, iat now, exp in one hour. Change them at will.
func (i *Issuer) Claims(aud, sub string) map[string]any {
	now := time.Now()
	return map[string]any{
		"iss": i.URL, "sub": sub, "aud": aud,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	}
}

// Token signs claims with the current key; the header carries alg, kid and
// typ "JWT", plus headers (which may override kid, or drop it with nil).
func (i *Issuer) Token(t testing.TB, claims map[string]any, headers map[string]any) string {
	t.Helper()
	i.mu.Lock()
	k := i.keys[0]
	i.mu.Unlock()
	return SignWith(t, k.alg, k.priv, k.kid, claims, headers)
}

// SignWith signs claims with priv as alg, with key id kid ("" for none):
// for tokens from a key the issuer does not publish.
func SignWith(t testing.TB, alg jose.SignatureAlgorithm, priv crypto.Signer, kid string, claims, headers map[string]any) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType("JWT")
	if kid != "" {
		opts = opts.WithHeader("kid", kid)
	}
	for k, v := range headers {
		if v == nil {
			delete(opts.ExtraHeaders, jose.HeaderKey(k))
			continue
		}
		opts = opts.WithHeader(jose.HeaderKey(k), v)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: priv}, opts)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := s.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Unsigned builds header.payload.signature by hand, with sig as given
// (nil for an empty signature): for "alg": "none" and other forgeries.
func Unsigned(t testing.TB, header, claims map[string]any, sig []byte) string {
	t.Helper()
	return seg(t, header) + "." + seg(t, claims) + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// HS256 signs header and claims with HMAC-SHA256 keyed by secret, header
// "alg" forced to HS256.
func HS256(t testing.TB, header, claims map[string]any, secret []byte) string {
	t.Helper()
	h := map[string]any{}
	for k, v := range header {
		h[k] = v
	}
	h["alg"] = "HS256"
	signing := seg(t, h) + "." + seg(t, claims)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(signing))
	return signing + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func seg(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func (i *Issuer) isDown(w http.ResponseWriter) bool {
	i.mu.Lock()
	down := i.down
	i.mu.Unlock()
	if down {
		http.Error(w, "issuer down for the test", http.StatusServiceUnavailable)
	}
	return down
}

func (i *Issuer) serveDiscovery(w http.ResponseWriter, _ *http.Request) {
	i.discov.Add(1)
	if i.isDown(w) {
		return
	}
	writeJSON(w, map[string]any{
		"issuer":                                i.URL,
		"authorization_endpoint":                i.URL + "/auth",
		"token_endpoint":                        i.URL + "/token",
		"jwks_uri":                              i.URL + "/keys",
		"response_types_supported":              []string{"id_token"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": []string{"RS256", "ES256"},
	})
}

func (i *Issuer) serveJWKS(w http.ResponseWriter, _ *http.Request) {
	i.jwks.Add(1)
	if i.isDown(w) {
		return
	}
	i.mu.Lock()
	set := jose.JSONWebKeySet{}
	for _, k := range i.keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.priv.Public(), KeyID: k.kid, Algorithm: string(k.alg), Use: "sig"})
	}
	i.mu.Unlock()
	writeJSON(w, set)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
