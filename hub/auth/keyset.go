package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
)

// DefaultKeyRefreshMinInterval is the least time between two fetches of an
// issuer's JWKS caused by tokens the current keys do not verify.
const DefaultKeyRefreshMinInterval = 10 * time.Second

// maxJWKSBytes bounds a JWKS response.
const maxJWKSBytes = 1 << 20

// remoteKeys is an oidc.KeySet over an issuer's jwks_uri, like go-oidc's
// RemoteKeySet (fetch on first use, fetch again when a token names a key
// it does not have, one fetch in flight at a time) but with two
// differences: a refetch happens at most once per minRefresh, so a stream
// of forged tokens with made-up key ids costs the issuer one request per
// interval instead of one per token; and a failed fetch keeps the keys
// already known.
type remoteKeys struct {
	url        string
	client     *http.Client
	base       context.Context
	algs       []jose.SignatureAlgorithm
	minRefresh time.Duration
	now        func() time.Time

	mu       sync.Mutex
	keys     []jose.JSONWebKey
	fetched  time.Time // start of the last fetch; zero before the first
	inflight chan struct{}
	lastErr  error
}

var _ oidc.KeySet = (*remoteKeys)(nil)

// errKeysRecent means a token's key is unknown and the keys were fetched
// too recently to fetch them again.
var errKeysRecent = errors.New("no key verifies the token and the issuer's keys were fetched too recently to fetch again")

// VerifySignature implements oidc.KeySet. go-oidc's verifier has already
// checked the algorithm against the allowed list; it is checked again here.
func (r *remoteKeys) VerifySignature(ctx context.Context, raw string) ([]byte, error) {
	jws, err := jose.ParseSigned(raw, r.algs)
	if err != nil {
		return nil, fmt.Errorf("malformed JWS: %w", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("not exactly one signature")
	}
	r.mu.Lock()
	keys := r.keys
	r.mu.Unlock()
	return r.verify(ctx, jws, keys)
}

// verify checks jws with keys (as the caller last read them) and, when
// none verifies, with the keys a refresh gives. A refresh refused as too
// recent still gives the current keys: a fetch may have finished since
// the caller read its keys (on a fresh hub, every request that read the
// empty set before the first fetch finished), and those keys must be
// tried before the token is called invalid.
func (r *remoteKeys) verify(ctx context.Context, jws *jose.JSONWebSignature, keys []jose.JSONWebKey) ([]byte, error) {
	if payload, err := verifyWithKeys(jws, keys); err == nil {
		return payload, nil
	}
	keys, err := r.refresh(ctx)
	if errors.Is(err, errKeysRecent) {
		if payload, verr := verifyWithKeys(jws, keys); verr == nil {
			return payload, nil
		}
	}
	if err != nil {
		return nil, err
	}
	return verifyWithKeys(jws, keys)
}

// verifyWithKeys tries the keys whose id matches the token's (every key
// when the token names none).
func verifyWithKeys(jws *jose.JSONWebSignature, keys []jose.JSONWebKey) ([]byte, error) {
	h := jws.Signatures[0].Header
	for i := range keys {
		k := &keys[i]
		if h.KeyID != "" && k.KeyID != h.KeyID {
			continue
		}
		if k.Algorithm != "" && k.Algorithm != h.Algorithm {
			continue
		}
		if payload, err := jws.Verify(k); err == nil {
			return payload, nil
		}
	}
	if h.KeyID != "" {
		return nil, fmt.Errorf("no key with id %q verifies the signature", clip(h.KeyID, 64))
	}
	return nil, errors.New("no key verifies the signature")
}

// refresh fetches the keys unless a fetch started less than minRefresh ago
// (the first fetch is always allowed; too recent, it returns the current
// keys with errKeysRecent); callers during a fetch wait for it, at most
// until ctx is done.
func (r *remoteKeys) refresh(ctx context.Context) ([]jose.JSONWebKey, error) {
	r.mu.Lock()
	if r.inflight == nil {
		now := r.now()
		if !r.fetched.IsZero() && now.Sub(r.fetched) < r.minRefresh && !now.Before(r.fetched) {
			keys := r.keys
			r.mu.Unlock()
			return keys, errKeysRecent
		}
		r.fetched = now
		r.inflight = make(chan struct{})
		go r.fetch(r.inflight)
	}
	ch := r.inflight
	r.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the issuer's keys: %w", ctx.Err())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.keys, r.lastErr
}

func (r *remoteKeys) fetch(done chan struct{}) {
	keys, err := r.get()
	r.mu.Lock()
	defer r.mu.Unlock()
	defer close(done)
	r.inflight = nil
	r.lastErr = err
	if err == nil {
		r.keys = keys
	}
}

func (r *remoteKeys) get() ([]jose.JSONWebKey, error) {
	req, err := http.NewRequestWithContext(r.base, http.MethodGet, r.url, nil)
	if err != nil {
		return nil, fmt.Errorf("fetch keys: %w", err)
	}
	req.Header.Set("Cache-Control", "no-cache")
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch keys: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("fetch keys: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch keys: %s", resp.Status)
	}
	if len(body) > maxJWKSBytes {
		return nil, fmt.Errorf("fetch keys: JWKS larger than %d bytes", maxJWKSBytes)
	}
	return parseJWKS(body)
}

// parseJWKS keeps the public signing keys of a JWKS and skips keys of
// types or uses it cannot verify with, as RFC 7517 section 5 asks.
func parseJWKS(body []byte) ([]jose.JSONWebKey, error) {
	var raw struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, fmt.Errorf("decode JWKS: %w", err)
	}
	var keys []jose.JSONWebKey
	for _, m := range raw.Keys {
		var k jose.JSONWebKey
		if err := json.Unmarshal(m, &k); err != nil {
			continue
		}
		if !k.Valid() || !k.IsPublic() || (k.Use != "" && k.Use != "sig") {
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("JWKS has no usable public signing key")
	}
	return keys, nil
}
