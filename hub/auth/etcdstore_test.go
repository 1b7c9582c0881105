package auth

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/hub/store"
)

func newEtcdTokenStore(t testing.TB) *EtcdTokenStore {
	t.Helper()
	srv := etcdServer(t)
	cli, err := srv.Client(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	s, err := store.New(cli, store.Options{MaxTxnOps: srv.MaxTxnOps()})
	if err != nil {
		t.Fatal(err)
	}
	es := NewEtcdTokenStore(s)
	es.prefix = fmt.Sprintf("/t/%s/%d/", t.Name(), time.Now().UnixNano()) // a key space per test
	return es
}

// The etcd store on a real embedded etcd: create once, read, update under
// concurrent writers without losing one, list, delete; and Tokens end to
// end over it.
func TestEtcdTokenStore(t *testing.T) {
	es := newEtcdTokenStore(t)
	ctx := testCtx(t)
	rec := &TokenRecord{ID: "abcdefghijklmnop", Name: "ci", CreatedAt: time.Now().UTC().Truncate(time.Second), ExpiresAt: time.Now().Add(time.Hour).UTC().Truncate(time.Second), SecretHash: []byte{1, 2, 3}}
	if err := es.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if err := es.Create(ctx, rec); !errors.Is(err, ErrTokenExists) {
		t.Fatalf("second Create: %v, want ErrTokenExists", err)
	}
	got, err := es.Get(ctx, rec.ID)
	if err != nil || got.Name != "ci" || !got.ExpiresAt.Equal(rec.ExpiresAt) || string(got.SecretHash) != "\x01\x02\x03" {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := es.Update(ctx, rec.ID, func(r *TokenRecord) error {
				r.Roles = append(r.Roles, fmt.Sprint(i))
				return nil
			}); err != nil {
				t.Errorf("Update %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	got, _ = es.Get(ctx, rec.ID)
	if len(got.Roles) != 8 {
		t.Fatalf("after 8 concurrent updates Roles = %v, want 8 entries", got.Roles)
	}
	boom := errors.New("boom")
	if err := es.Update(ctx, rec.ID, func(*TokenRecord) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Update with a failing fn: %v", err)
	}
	for _, id := range []string{"nonexistentidabc", "../../workloads/x"} {
		if _, err := es.Get(ctx, id); !errors.Is(err, ErrTokenNotFound) {
			t.Fatalf("Get(%q): %v, want not found", id, err)
		}
		if err := es.Update(ctx, id, func(*TokenRecord) error { return nil }); !errors.Is(err, ErrTokenNotFound) {
			t.Fatalf("Update(%q): %v, want not found", id, err)
		}
		if err := es.Delete(ctx, id); !errors.Is(err, ErrTokenNotFound) {
			t.Fatalf("Delete(%q): %v, want not found", id, err)
		}
	}

	tk, err := NewTokens(TokensOptions{Store: es})
	if err != nil {
		t.Fatal(err)
	}
	defer tk.Close()
	sec, _, err := tk.Issue(ctx, IssueRequest{Name: "deploy", User: "alice", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	p, err := tk.Authenticate(ctx, bearer(sec.Reveal()))
	if err != nil || p.User != "alice" || p.TokenID != sec.ID() {
		t.Fatalf("Authenticate over etcd: %+v, %s", p, AuditDetail(err))
	}
	tk.Close() // wait for the last-use write
	if r, _ := es.Get(ctx, sec.ID()); r.LastUsedAt.IsZero() {
		t.Fatal("last use not written to etcd")
	}
	if err := tk.Revoke(ctx, sec.ID(), "admin"); err != nil {
		t.Fatal(err)
	}
	_, err = tk.Authenticate(ctx, bearer(sec.Reveal()))
	mustUnauth(t, err, "revoked", sec.Reveal())
	list, err := es.List(ctx)
	if err != nil || len(list) != 2 || list[0].ID > list[1].ID {
		t.Fatalf("List = %v, %v", list, err)
	}
	if err := es.Delete(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := es.Get(ctx, rec.ID); !errors.Is(err, ErrTokenNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
}
