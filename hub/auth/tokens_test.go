package auth

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// countingStore counts Update calls on a MemTokenStore.
type countingStore struct {
	*MemTokenStore
	mu      sync.Mutex
	updates int
}

func (c *countingStore) Update(ctx context.Context, id string, fn func(*TokenRecord) error) error {
	c.mu.Lock()
	c.updates++
	c.mu.Unlock()
	return c.MemTokenStore.Update(ctx, id, fn)
}

func (c *countingStore) Updates() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.updates
}

type tokensFixture struct {
	*Tokens
	store *countingStore
	clock *clock
}

func newTokens(t testing.TB, st *countingStore, mutate func(*TokensOptions)) *tokensFixture {
	t.Helper()
	if st == nil {
		st = &countingStore{MemTokenStore: &MemTokenStore{}}
	}
	f := &tokensFixture{store: st, clock: newClock()}
	opts := TokensOptions{Store: st, Now: f.clock.Now}
	if mutate != nil {
		mutate(&opts)
	}
	tk, err := NewTokens(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tk.Close)
	f.Tokens = tk
	return f
}

func (f *tokensFixture) issue(t testing.TB, req IssueRequest) Secret {
	t.Helper()
	if req.TTL == 0 {
		req.TTL = time.Hour
	}
	sec, _, err := f.Issue(testCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	return sec
}

// An issued token authenticates as the user and groups it acts as, with
// its roles; one not bound to a user is "token:<id>". The store holds only
// the hash.
func TestTokensIssueAndAuthenticate(t *testing.T) {
	f := newTokens(t, nil, nil)
	ctx := testCtx(t)
	sec, rec, err := f.Issue(ctx, IssueRequest{Name: "ci", User: "alice", Groups: []string{"ml"}, Roles: []string{"queue:submit"}, CreatedBy: "admin", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	tok := sec.Reveal()
	if id, s, ok := parseAPIToken(tok); !ok || id != rec.ID || len(s) != 52 || !strings.HasPrefix(tok, "mrd_"+rec.ID+"_") {
		t.Fatalf("token %q does not have the documented format", tok)
	}
	stored, err := f.store.Get(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(stored)
	if bytes.Contains(js, []byte(tok[len(TokenPrefix)+17:])) {
		t.Fatal("the store holds the secret")
	}
	p, err := f.Authenticate(ctx, bearer(tok))
	if err != nil {
		t.Fatal(AuditDetail(err))
	}
	want := &Principal{User: "alice", Groups: []string{"ml"}, Method: MethodToken, TokenID: rec.ID, Roles: []string{"queue:submit"}, ExpiresAt: rec.ExpiresAt}
	if !principalEqual(p, want) {
		t.Fatalf("principal = %+v, want %+v", p, want)
	}
	bot := f.issue(t, IssueRequest{Name: "bot", Roles: []string{"read"}})
	if p, err := f.Authenticate(ctx, bearer(bot.Reveal())); err != nil || p.User != "token:"+bot.ID() {
		t.Fatalf("unbound token: %+v, %s", p, AuditDetail(err))
	}
	list, err := f.List(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("List = %d records, %v", len(list), err)
	}
	for name, req := range map[string]IssueRequest{
		"no TTL":         {Name: "x"},
		"TTL over max":   {Name: "x", TTL: DefaultTokenMaxLifetime + time.Hour},
		"negative TTL":   {Name: "x", TTL: -time.Hour},
		"control in use": {Name: "x\n", TTL: time.Hour},
	} {
		if _, _, err := f.Issue(ctx, req); err == nil {
			t.Errorf("%s: Issue accepted %+v", name, req)
		}
	}
}

// Every way of printing a Secret shows only its id.
func TestSecretRedacted(t *testing.T) {
	f := newTokens(t, nil, nil)
	sec := f.issue(t, IssueRequest{Name: "ci"})
	tok := sec.Reveal()
	secret := tok[len(TokenPrefix)+17:]
	type holder struct {
		s   Secret
		Pub Secret
	}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("issued", "token", sec, "h", holder{sec, sec})
	slog.New(slog.NewTextHandler(&buf, nil)).Info("issued", "token", sec)
	js, _ := json.Marshal(map[string]any{"t": sec, "h": holder{sec, sec}})
	outs := []string{
		fmt.Sprint(sec), fmt.Sprintf("%v %+v %#v %s %q %x %X %d", sec, sec, sec, sec, sec, sec, sec, sec),
		fmt.Sprintf("%v %+v %#v", holder{sec, sec}, holder{sec, sec}, holder{sec, sec}),
		fmt.Sprintf("%v", &holder{sec, sec}), buf.String(), string(js),
		fmt.Sprint(Credentials{Authorization: "Bearer " + tok}), fmt.Sprintf("%#v", Credentials{Authorization: "Bearer " + tok}),
	}
	for _, o := range outs {
		if strings.Contains(o, secret) {
			t.Fatalf("secret printed: %s", o)
		}
	}
	if !strings.Contains(fmt.Sprint(sec), sec.ID()) {
		t.Fatalf("String %q should name the id", sec)
	}
}

// Bad API tokens are unauthenticated with a plain reason; a store outage
// is unavailable, not unauthenticated.
func TestTokensRejects(t *testing.T) {
	f := newTokens(t, nil, nil)
	ctx := testCtx(t)
	good := f.issue(t, IssueRequest{Name: "good"}).Reveal()
	revoked := f.issue(t, IssueRequest{Name: "revoked"})
	if err := f.Revoke(ctx, revoked.ID(), "admin"); err != nil {
		t.Fatal(err)
	}
	deleted := f.issue(t, IssueRequest{Name: "deleted"})
	if err := f.Delete(ctx, deleted.ID()); err != nil {
		t.Fatal(err)
	}
	expired := f.issue(t, IssueRequest{Name: "short", TTL: time.Minute})
	f.clock.Advance(2 * time.Minute)
	wrongSecret := good[:len(good)-4] + "aaaa"
	if wrongSecret == good {
		wrongSecret = good[:len(good)-4] + "bbbb"
	}
	tests := map[string]struct{ token, reason string }{
		"revoked":         {revoked.Reveal(), "revoked"},
		"deleted":         {deleted.Reveal(), "invalid API token"},
		"expired":         {expired.Reveal(), "expired"},
		"wrong secret":    {wrongSecret, "invalid API token"},
		"unknown id":      {"mrd_aaaaaaaaaaaaaaaa_" + good[len(TokenPrefix)+17:], "invalid API token"},
		"short":           {good[:len(good)-1], "malformed API token"},
		"long":            {good + "a", "malformed API token"},
		"upper case":      {strings.ToUpper(good[:4]) + good[4:], "not recognized"},
		"bad alphabet":    {good[:len(good)-1] + "1", "malformed API token"},
		"no separator":    {good[:20] + good[21:] + "a", "malformed API token"},
		"prefix only":     {"mrd_", "malformed API token"},
		"id upper case":   {"mrd_" + strings.ToUpper(good[4:20]) + good[20:], "malformed API token"},
		"second _ moved":  {good[:19] + "_" + good[19:20] + good[21:], "malformed API token"},
		"secret of other": {good[:21] + revoked.Reveal()[21:], "invalid API token"},
	}
	chain := NewChain(f)
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, err := chain.Authenticate(ctx, bearer(tc.token))
			if err == nil {
				t.Fatalf("accepted as %+v", p)
			}
			mustUnauth(t, err, tc.reason, tc.token)
		})
	}
	f.store.SetErr(errors.New("etcd is down"))
	f.clock.Advance(time.Hour) // past the cache
	if _, err := f.Authenticate(ctx, bearer(good)); !IsUnavailable(err) || IsUnauthenticated(err) {
		t.Fatalf("store outage: err = %v, want unavailable", err)
	}
}

// Records are cached: N calls read the store once. A revocation on this
// hub is immediate; one made on another hub takes effect within CacheTTL.
func TestTokensCacheAndRevocation(t *testing.T) {
	st := &countingStore{MemTokenStore: &MemTokenStore{}}
	a := newTokens(t, st, nil)
	b := newTokens(t, st, func(o *TokensOptions) { o.Now = a.clock.Now }) // another hub, same store and clock
	ctx := testCtx(t)
	sec := a.issue(t, IssueRequest{Name: "ci"})
	tok := sec.Reveal()
	gets := st.GetCalls()
	for i := range 100 {
		if _, err := a.Authenticate(ctx, bearer(tok)); err != nil {
			t.Fatalf("call %d: %s", i, AuditDetail(err))
		}
	}
	if got := st.GetCalls() - gets; got != 1 {
		t.Fatalf("100 calls read the store %d times, want 1", got)
	}
	if _, err := b.Authenticate(ctx, bearer(tok)); err != nil {
		t.Fatal(AuditDetail(err))
	}
	if err := a.Revoke(ctx, sec.ID(), "admin"); err != nil {
		t.Fatal(err)
	}
	_, err := a.Authenticate(ctx, bearer(tok))
	mustUnauth(t, err, "revoked", tok)
	if !strings.Contains(AuditDetail(err), "by admin") {
		t.Fatalf("audit detail %q should say who revoked", AuditDetail(err))
	}
	if _, err := b.Authenticate(ctx, bearer(tok)); err != nil {
		t.Fatalf("other hub within CacheTTL still uses its cached record: %s", AuditDetail(err))
	}
	a.clock.Advance(DefaultTokenCacheTTL)
	_, err = b.Authenticate(ctx, bearer(tok))
	mustUnauth(t, err, "revoked", tok)

	// Unknown ids are cached too: a stream of made-up tokens reads the
	// store once per id per CacheTTL.
	bogus := "mrd_aaaaaaaaaaaaaaaa_" + strings.Repeat("b", 52)
	gets = st.GetCalls()
	for range 20 {
		_, _ = a.Authenticate(ctx, bearer(bogus))
	}
	if got := st.GetCalls() - gets; got != 1 {
		t.Fatalf("20 calls with an unknown id read the store %d times, want 1", got)
	}
}

// Last use is written at most once per TouchEvery per token, in the
// background, never failing the request.
func TestTokensLastUseThrottled(t *testing.T) {
	f := newTokens(t, nil, nil)
	ctx := testCtx(t)
	sec := f.issue(t, IssueRequest{Name: "ci"})
	before := f.store.Updates()
	wait := func() { f.Tokens.wg.Wait() }
	for range 50 {
		if _, err := f.Authenticate(ctx, bearer(sec.Reveal())); err != nil {
			t.Fatal(AuditDetail(err))
		}
		f.clock.Advance(100 * time.Millisecond)
	}
	wait()
	if got := f.store.Updates() - before; got != 1 {
		t.Fatalf("50 calls in 5 s wrote last use %d times, want 1", got)
	}
	rec, _ := f.store.Get(ctx, sec.ID())
	if rec.LastUsedAt.IsZero() {
		t.Fatal("last use not recorded")
	}
	f.clock.Advance(DefaultTouchEvery)
	if _, err := f.Authenticate(ctx, bearer(sec.Reveal())); err != nil {
		t.Fatal(AuditDetail(err))
	}
	wait()
	if got := f.store.Updates() - before; got != 2 {
		t.Fatalf("after TouchEvery: %d writes, want 2", got)
	}
	rec2, _ := f.store.Get(ctx, sec.ID())
	if !rec2.LastUsedAt.After(rec.LastUsedAt) {
		t.Fatalf("last use %s not after %s", rec2.LastUsedAt, rec.LastUsedAt)
	}
	// A failing write is logged and does not fail the request.
	f.clock.Advance(DefaultTouchEvery + DefaultTokenCacheTTL)
	if _, err := f.Authenticate(ctx, bearer(sec.Reveal())); err != nil {
		t.Fatal(AuditDetail(err))
	}
	f.Close()
}

func TestTokensIDValidation(t *testing.T) {
	f := newTokens(t, nil, nil)
	ctx := testCtx(t)
	for _, id := range []string{"", "../x", "AAAAAAAAAAAAAAAA", "aaaa", strings.Repeat("a", 17)} {
		if err := f.Revoke(ctx, id, "x"); !errors.Is(err, ErrTokenNotFound) {
			t.Errorf("Revoke(%q) = %v", id, err)
		}
		if _, err := f.Get(ctx, id); !errors.Is(err, ErrTokenNotFound) {
			t.Errorf("Get(%q) = %v", id, err)
		}
	}
	if !slices.Equal([]bool{ValidTokenID("abcdefghijklmn23"), ValidTokenID("abcdefghijklmn21")}, []bool{true, false}) {
		t.Fatal("ValidTokenID")
	}
}
