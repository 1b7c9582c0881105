package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of TokensOptions.
const (
	DefaultTokenCacheTTL    = 5 * time.Second
	DefaultTokenCacheSize   = 4096
	DefaultTouchEvery       = time.Minute
	DefaultTokenMaxLifetime = 365 * 24 * time.Hour
	DefaultStoreTimeout     = 5 * time.Second
	maxConcurrentTouches    = 16
)

// TokensOptions configure API tokens.
type TokensOptions struct {
	// Store keeps the records. Required.
	Store TokenStore
	// CacheTTL is how long a record read from the store is trusted: the
	// bound on how late a revocation made on another hub takes effect here.
	// Default DefaultTokenCacheTTL. (On the hub that revokes, it is at once.)
	CacheTTL time.Duration
	// CacheSize bounds the record cache (entries); default
	// DefaultTokenCacheSize.
	CacheSize int
	// TouchEvery is the least time between two last-use writes of one
	// token; default DefaultTouchEvery.
	TouchEvery time.Duration
	// MaxLifetime bounds IssueRequest.TTL; default DefaultTokenMaxLifetime.
	MaxLifetime time.Duration
	// StoreTimeout bounds each background last-use write; default
	// DefaultStoreTimeout.
	StoreTimeout time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives failed last-use writes; nil drops them.
	Logger *slog.Logger
}

// Tokens issues, lists and revokes API tokens and authenticates requests
// that carry one. Verification costs a SHA-256 and a constant-time compare
// against a cached record; the store is read at most once per CacheTTL per
// token id (also for ids that do not exist).
type Tokens struct {
	opts  TokensOptions
	now   func() time.Time
	log   *slog.Logger
	cache *lru[*tokenEntry]

	sem    chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex // guards closed
	closed bool
}

var _ Authenticator = (*Tokens)(nil)

// tokenEntry is a cached store read. rec is nil when the id did not exist.
type tokenEntry struct {
	rec     *TokenRecord
	fetched time.Time
	touched *atomic.Int64 // unix nanos of the last last-use write, kept across refreshes
}

// NewTokens checks opts and returns the method.
func NewTokens(opts TokensOptions) (*Tokens, error) {
	if opts.Store == nil {
		return nil, errors.New("auth: TokensOptions.Store is required")
	}
	if opts.CacheTTL == 0 {
		opts.CacheTTL = DefaultTokenCacheTTL
	}
	if opts.CacheSize == 0 {
		opts.CacheSize = DefaultTokenCacheSize
	}
	if opts.TouchEvery == 0 {
		opts.TouchEvery = DefaultTouchEvery
	}
	if opts.MaxLifetime == 0 {
		opts.MaxLifetime = DefaultTokenMaxLifetime
	}
	if opts.StoreTimeout == 0 {
		opts.StoreTimeout = DefaultStoreTimeout
	}
	if opts.CacheTTL < 0 || opts.CacheSize < 0 || opts.TouchEvery < 0 || opts.MaxLifetime < 0 || opts.StoreTimeout < 0 {
		return nil, errors.New("auth: TokensOptions values must not be negative")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Tokens{
		opts:  opts,
		now:   nowFunc(opts.Now),
		log:   log,
		cache: newLRU[*tokenEntry](opts.CacheSize),
		sem:   make(chan struct{}, maxConcurrentTouches),
	}, nil
}

// Close waits for pending last-use writes and starts no more.
func (t *Tokens) Close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.wg.Wait()
}

// IssueRequest is what to issue. The caller has already checked that the
// creator may issue a token with these roles acting as this user.
type IssueRequest struct {
	Name      string
	User      string
	Groups    []string
	Roles     []string
	CreatedBy string
	// TTL is how long the token is valid; required, at most MaxLifetime.
	TTL time.Duration
}

// Issue creates a token and stores its record. The Secret is the only copy
// of the token: hand Secret.Reveal() to the creator once.
func (t *Tokens) Issue(ctx context.Context, req IssueRequest) (Secret, *TokenRecord, error) {
	if req.TTL <= 0 || req.TTL > t.opts.MaxLifetime {
		return Secret{}, nil, fmt.Errorf("auth: token lifetime %s must be positive and at most %s", req.TTL, t.opts.MaxLifetime)
	}
	if !printable(req.Name) || !printable(req.User) {
		return Secret{}, nil, errors.New("auth: token name and user must be printable")
	}
	for range 3 { // an id collision is all but impossible; retry anyway
		sec, hash, err := newSecret(newRandom)
		if err != nil {
			return Secret{}, nil, err
		}
		now := t.now().UTC().Truncate(time.Second)
		rec := &TokenRecord{
			ID: sec.ID(), Name: req.Name, User: req.User,
			Groups: slices.Clone(req.Groups), Roles: slices.Clone(req.Roles),
			CreatedBy: req.CreatedBy, CreatedAt: now, ExpiresAt: now.Add(req.TTL),
			SecretHash: hash,
		}
		err = t.opts.Store.Create(ctx, rec)
		if errors.Is(err, ErrTokenExists) {
			continue
		}
		if err != nil {
			return Secret{}, nil, err
		}
		return sec, rec.Clone(), nil
	}
	return Secret{}, nil, errors.New("auth: could not pick a free token id")
}

// Get returns the record of id.
func (t *Tokens) Get(ctx context.Context, id string) (*TokenRecord, error) {
	if !ValidTokenID(id) {
		return nil, fmt.Errorf("auth: %q is not an API token id: %w", clip(id, 64), ErrTokenNotFound)
	}
	return t.opts.Store.Get(ctx, id)
}

// List returns every record, ordered by id.
func (t *Tokens) List(ctx context.Context) ([]*TokenRecord, error) { return t.opts.Store.List(ctx) }

// Revoke marks the token revoked by by. It takes effect on this hub at once
// and on the others within CacheTTL. Revoking twice keeps the first time.
func (t *Tokens) Revoke(ctx context.Context, id, by string) error {
	if !ValidTokenID(id) {
		return fmt.Errorf("auth: %q is not an API token id: %w", clip(id, 64), ErrTokenNotFound)
	}
	now := t.now().UTC()
	err := t.opts.Store.Update(ctx, id, func(r *TokenRecord) error {
		if r.RevokedAt.IsZero() {
			r.RevokedAt, r.RevokedBy = now, by
		}
		return nil
	})
	t.cache.remove(idKey(id))
	return err
}

// Delete removes the record: the token stops working like a revoked one
// (on other hubs within CacheTTL) and no longer shows in List.
func (t *Tokens) Delete(ctx context.Context, id string) error {
	if !ValidTokenID(id) {
		return fmt.Errorf("auth: %q is not an API token id: %w", clip(id, 64), ErrTokenNotFound)
	}
	err := t.opts.Store.Delete(ctx, id)
	t.cache.remove(idKey(id))
	return err
}

func idKey(id string) [32]byte { return sha256.Sum256([]byte("id:" + id)) }

// Authenticate implements Authenticator. It applies to bearer tokens that
// start with TokenPrefix.
func (t *Tokens) Authenticate(ctx context.Context, cr Credentials) (*Principal, error) {
	tok, err := cr.BearerToken()
	if err != nil {
		if IsNoCredentials(err) {
			return nil, errNotApplicable
		}
		return nil, err
	}
	if len(tok) < len(TokenPrefix) || tok[:len(TokenPrefix)] != TokenPrefix {
		return nil, errNotApplicable
	}
	id, secret, ok := parseAPIToken(tok)
	if !ok {
		return nil, unauth(MethodToken, "malformed API token", "API token has the wrong length or alphabet", nil)
	}
	now := t.now()
	e, err := t.entry(ctx, id, now)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(secret))
	want := make([]byte, sha256.Size)
	if e.rec != nil {
		want = e.rec.SecretHash
	}
	match := subtle.ConstantTimeCompare(sum[:], want) == 1
	switch {
	case e.rec == nil:
		return nil, unauth(MethodToken, "invalid API token", "token "+id+" does not exist", nil)
	case !match:
		return nil, unauth(MethodToken, "invalid API token", "token "+id+": wrong secret", nil)
	case e.rec.Revoked():
		return nil, unauth(MethodToken, "API token revoked", "token "+id+" revoked at "+e.rec.RevokedAt.Format(time.RFC3339)+" by "+e.rec.RevokedBy, nil)
	case !now.Before(e.rec.ExpiresAt):
		return nil, unauth(MethodToken, "API token expired", "token "+id+" expired at "+e.rec.ExpiresAt.Format(time.RFC3339), nil)
	}
	t.maybeTouch(ctx, id, e, now)
	r := e.rec
	p := &Principal{
		User:      r.User,
		Groups:    slices.Clone(r.Groups),
		Method:    MethodToken,
		TokenID:   r.ID,
		Roles:     slices.Clone(r.Roles),
		ExpiresAt: r.ExpiresAt,
	}
	if p.User == "" {
		p.User = TokenUserPrefix + r.ID
	}
	return p, nil
}

// entry returns the cached record of id, reading the store when the cache
// has none younger than CacheTTL.
func (t *Tokens) entry(ctx context.Context, id string, now time.Time) (*tokenEntry, error) {
	k := idKey(id)
	old, ok := t.cache.get(k)
	if ok && now.Sub(old.fetched) < t.opts.CacheTTL && !now.Before(old.fetched) {
		return old, nil
	}
	rec, err := t.opts.Store.Get(ctx, id)
	if err != nil && !errors.Is(err, ErrTokenNotFound) {
		return nil, unavailable(MethodToken, "token store unavailable", "read token "+id, err)
	}
	e := &tokenEntry{rec: rec, fetched: now, touched: new(atomic.Int64)}
	if ok {
		e.touched = old.touched
	}
	if rec != nil && !rec.LastUsedAt.IsZero() {
		// Another hub may have written it; never write more often than it.
		for {
			cur := e.touched.Load()
			if rec.LastUsedAt.UnixNano() <= cur || e.touched.CompareAndSwap(cur, rec.LastUsedAt.UnixNano()) {
				break
			}
		}
	}
	t.cache.add(k, e)
	return e, nil
}

// maybeTouch records the last use in the background when the last write is
// older than TouchEvery: at most one write per token per TouchEvery per hub.
func (t *Tokens) maybeTouch(ctx context.Context, id string, e *tokenEntry, now time.Time) {
	last := e.touched.Load()
	if last != 0 && now.Sub(time.Unix(0, last)) < t.opts.TouchEvery {
		return
	}
	if !e.touched.CompareAndSwap(last, now.UnixNano()) {
		return // another request claimed this write
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	select {
	case t.sem <- struct{}{}:
	default:
		t.mu.Unlock()
		e.touched.CompareAndSwap(now.UnixNano(), last) // busy: let a later call try
		return
	}
	t.wg.Add(1)
	t.mu.Unlock()
	go func() {
		defer t.wg.Done()
		defer func() { <-t.sem }()
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.opts.StoreTimeout)
		defer cancel()
		at := now.UTC().Truncate(time.Second)
		err := t.opts.Store.Update(wctx, id, func(r *TokenRecord) error {
			if r.LastUsedAt.Before(at) {
				r.LastUsedAt = at
			}
			return nil
		})
		if err != nil {
			t.log.Warn("record API token last use", "token_id", id, "err", err)
		}
	}()
}
