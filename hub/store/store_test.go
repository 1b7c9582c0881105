package store

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meridian-gpu/meridian/hub/leader"
)

func TestCommitCompareAndSwap(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	s := newStore(t)
	p := testPrefix(t)
	a, b := p+"a", p+"b"

	rev1, err := s.Commit(ctx, nil, PutIfModRev(a, []byte("a1"), 0), PutIfModRev(b, []byte("b1"), 0))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	val, modA, err := s.Get(ctx, a)
	if err != nil || string(val) != "a1" || modA != rev1 {
		t.Fatalf("Get(a) = %q, %d, %v; want a1 at rev %d", val, modA, err, rev1)
	}

	// Creating again must fail and name the key.
	_, err = s.Commit(ctx, nil, PutIfModRev(a, []byte("again"), 0))
	var ce *ConflictError
	if !errors.As(err, &ce) || !IsConflict(err) || IsNotLeader(err) {
		t.Fatalf("second create: err = %v, want a ConflictError", err)
	}
	if len(ce.Keys) != 1 || ce.Keys[0] != (KeyConflict{Key: a, Want: 0, Have: rev1}) {
		t.Fatalf("conflict keys = %+v, want [{%s 0 %d}]", ce.Keys, a, rev1)
	}
	if !strings.Contains(err.Error(), a) {
		t.Fatalf("error %q does not name key %s", err, a)
	}

	rev2, err := s.Commit(ctx, nil, PutIfModRev(a, []byte("a2"), rev1))
	if err != nil {
		t.Fatalf("update with the current mod rev: %v", err)
	}
	if rev2 <= rev1 {
		t.Fatalf("commit rev %d not after %d", rev2, rev1)
	}

	// One stale check among fresh ones: the error names only the stale key
	// and nothing at all is written.
	_, err = s.Commit(ctx, nil,
		PutIfModRev(a, []byte("a3"), rev2),
		PutIfModRev(b, []byte("b3"), rev1-1), // stale on purpose: b is at rev1
		Put(p+"c", []byte("c3")),
	)
	if !errors.As(err, &ce) {
		t.Fatalf("stale b: err = %v, want ConflictError", err)
	}
	if len(ce.Keys) != 1 || ce.Keys[0].Key != b || ce.Keys[0].Have != rev1 {
		t.Fatalf("conflict keys = %+v, want only %s with have=%d", ce.Keys, b, rev1)
	}
	if v, _, _ := s.Get(ctx, a); string(v) != "a2" {
		t.Fatalf("a = %q after a refused commit, want a2 (atomicity)", v)
	}
	if _, _, err := s.Get(ctx, p+"c"); !IsNotFound(err) {
		t.Fatalf("c written by a refused commit: err = %v", err)
	}

	// Delete and Check.
	if _, err := s.Commit(ctx, nil, Delete(a, rev1)); !IsConflict(err) {
		t.Fatalf("delete with stale rev: err = %v, want conflict", err)
	}
	if _, err := s.Commit(ctx, nil, Check(b, rev1), Delete(a, rev2)); err != nil {
		t.Fatalf("delete with current rev: %v", err)
	}
	if _, _, err := s.Get(ctx, a); !IsNotFound(err) || !strings.Contains(err.Error(), a) {
		t.Fatalf("Get of deleted key: err = %v, want not found naming the key", err)
	}
	if _, err := s.Commit(ctx, nil, Check(a, rev2)); !IsConflict(err) || !strings.Contains(err.Error(), "absent") {
		t.Fatalf("check of a deleted key: err = %v, want conflict saying absent", err)
	}
	if _, err := s.Commit(ctx, nil, DeleteAny(p+"never")); err != nil {
		t.Fatalf("DeleteAny on a missing key: %v", err)
	}
}

func TestCommitRejectsBadOps(t *testing.T) {
	ctx := testCtx(t, 5*time.Second)
	s := newStore(t)
	small, err := New(s.Client(), Options{MaxTxnOps: 3, KV: s.kv})
	if err != nil {
		t.Fatal(err)
	}
	p := testPrefix(t)
	tests := map[string]struct {
		st    *Store
		fence *leader.Fence
		ops   []Op
		want  string
	}{
		"no ops":                    {s, nil, nil, "at least one op"},
		"zero op":                   {s, nil, []Op{{}}, "zero Op"},
		"empty key":                 {s, nil, []Op{Put("", []byte("x"))}, "empty key"},
		"negative rev":              {s, nil, []Op{PutIfModRev(p+"x", nil, -1)}, "negative modRev"},
		"delete rev zero":           {s, nil, []Op{Delete(p+"x", 0)}, "DeleteAny"},
		"duplicate key":             {s, nil, []Op{Put(p+"x", nil), Check(p+"x", 0)}, "both touch key " + p + "x"},
		"two checks, two revisions": {s, nil, []Op{Check(p+"q", 5), Put(p+"x", nil), Check(p+"q", 6)}, "both touch key " + p + "q"},
		"too many ops":              {small, nil, []Op{Put(p+"1", nil), Put(p+"2", nil), Put(p+"3", nil), Put(p+"4", nil)}, "limit 3"},
		"zero fence":                {s, &leader.Fence{}, []Op{Put(p+"x", nil)}, "Fence.Key"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := tc.st.Commit(ctx, tc.fence, tc.ops...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Commit error = %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := small.Commit(ctx, nil, Put(p+"1", nil), Put(p+"2", nil), Put(p+"3", nil), Put(p+"4", nil)); !IsTooManyOps(err) {
		t.Fatalf("IsTooManyOps(%v) = false", err)
	}
	resp, err := s.Client().Get(ctx, p, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Fatalf("refused commits wrote %d keys", resp.Count)
	}
}

// Callers sharing a transaction (a group commit, a cycle creating
// several submits) may each check one key at one revision: the check is
// sent once, and still decides.
func TestCommitSendsARepeatedCheckOnce(t *testing.T) {
	ctx := testCtx(t, 5*time.Second)
	s := newStore(t)
	p := testPrefix(t)
	rev, err := s.Commit(ctx, nil, Put(p+"q", []byte("queue")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, nil, Check(p+"q", rev), Put(p+"a", nil), Check(p+"q", rev), Put(p+"b", nil), Check(p+"q", rev)); err != nil {
		t.Fatalf("a commit checking one key three times at one revision: %v", err)
	}
	if _, err := s.Commit(ctx, nil, Check(p+"q", rev+100), Put(p+"c", nil), Check(p+"q", rev+100)); !IsConflict(err) {
		t.Fatalf("a repeated check at a wrong revision: err = %v, want a conflict", err)
	}
	resp, err := s.Client().Get(ctx, p, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 3 {
		t.Fatalf("%d keys under the prefix (%v); want q, a and b", resp.Count, err)
	}
}

func TestCommitLargePlanInOneTxn(t *testing.T) {
	ctx := testCtx(t, 15*time.Second)
	s := newStore(t)
	p := testPrefix(t)
	ops := make([]Op, 1000)
	for i := range ops {
		ops[i] = PutIfModRev(fmt.Sprintf("%s%04d", p, i), []byte("v"), 0)
	}
	rev, err := s.Commit(ctx, nil, ops...)
	if err != nil {
		t.Fatalf("1,000-op commit (over stock etcd's 128): %v", err)
	}
	items, listRev, err := s.List(ctx, p, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 1000 || listRev < rev {
		t.Fatalf("List = %d items at rev %d; want 1000 at >= %d", len(items), listRev, rev)
	}
	for _, it := range items {
		if it.ModRev != rev {
			t.Fatalf("%s mod rev %d, want %d (one transaction)", it.Key, it.ModRev, rev)
		}
	}

	// A store configured above the server's limit gets the server's refusal
	// as ErrTooManyOps, not a silent split.
	over, _ := New(s.Client(), Options{MaxTxnOps: srv.MaxTxnOps() + 1, KV: s.kv})
	checks := make([]Op, srv.MaxTxnOps()+1)
	for i := range checks {
		checks[i] = Check(fmt.Sprintf("%sover/%05d", p, i), 0)
	}
	if _, err := over.Commit(ctx, nil, checks...); !IsTooManyOps(err) {
		t.Fatalf("commit over the server limit: err = %v, want ErrTooManyOps", err)
	}
}

func TestFencedCommitAfterLeaderChange(t *testing.T) {
	ctx := testCtx(t, 15*time.Second)
	s := newStore(t)
	p := testPrefix(t)
	c1, c2 := newClient(t), newClient(t)
	e1, err := leader.New(c1, p+"leader", "hub-a", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	e2, _ := leader.New(c2, p+"leader", "hub-b", 30*time.Second)
	f1, err := e1.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	key := p + "dispatch"
	rev, err := s.Commit(ctx, &f1, PutIfModRev(key, []byte("by-a"), 0))
	if err != nil {
		t.Fatalf("fenced commit by the leader: %v", err)
	}

	won := make(chan leader.Fence, 1)
	go func() {
		f, err := e2.Campaign(ctx)
		if err == nil {
			won <- f
		}
	}()
	if err := e1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	var f2 leader.Fence
	select {
	case f2 = <-won:
	case <-time.After(5 * time.Second):
		t.Fatal("hub-b did not take over")
	}
	defer e2.Resign(ctx)

	tests := map[string]struct {
		fence        leader.Fence
		modRev       int64
		wantLeader   bool
		wantConflict bool
	}{
		"old fence, fresh rev":  {f1, rev, true, false},
		"old fence, stale rev":  {f1, rev - 1, true, false},
		"new fence, stale rev":  {f2, rev - 1, false, true},
		"new fence, absent rev": {f2, 0, false, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := s.Commit(ctx, &tc.fence, PutIfModRev(key, []byte("x"), tc.modRev))
			if IsNotLeader(err) != tc.wantLeader || IsConflict(err) != tc.wantConflict {
				t.Fatalf("err = %v; want notLeader=%v conflict=%v", err, tc.wantLeader, tc.wantConflict)
			}
		})
	}
	if v, _, _ := s.Get(ctx, key); string(v) != "by-a" {
		t.Fatalf("value %q changed by refused commits", v)
	}
	if _, err := s.Commit(ctx, &f2, PutIfModRev(key, []byte("by-b"), rev)); err != nil {
		t.Fatalf("new leader's fenced commit: %v", err)
	}
	if v, _, _ := s.Get(ctx, key); string(v) != "by-b" {
		t.Fatalf("value = %q, want by-b", v)
	}
}

// TestListStreamsOrPaginates lists 53 keys three ways: streamed (etcd
// 3.7, more than one chunk: the server's first chunk holds 10), in pages
// of several sizes, and through the in-process client, whose adapter has no
// stream, so List falls back to pages.
func TestListStreamsOrPaginates(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	s := newStore(t)
	p := testPrefix(t)
	const n = 53
	for i := 0; i < n; i++ {
		if _, err := s.Commit(ctx, nil, Put(fmt.Sprintf("%s%03d", p, i), []byte(fmt.Sprint(i)))); err != nil {
			t.Fatal(err)
		}
	}
	// A key just past the prefix must not be listed.
	if _, err := s.Commit(ctx, nil, Put(strings.TrimSuffix(p, "/")+"0", []byte("outside"))); err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, items []Item, rev int64, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if len(items) != n {
			t.Fatalf("got %d items, want %d", len(items), n)
		}
		for i, it := range items {
			if want := fmt.Sprintf("%s%03d", p, i); it.Key != want || string(it.Value) != fmt.Sprint(i) || it.ModRev > rev || it.CreateRev != it.ModRev {
				t.Fatalf("item %d = %+v, want key %s value %d mod rev <= %d", i, it, want, i, rev)
			}
		}
	}
	t.Run("stream", func(t *testing.T) {
		items, rev, err := listStream(ctx, s.c, p)
		check(t, items, rev, err)
		items, rev, err = s.List(ctx, p, 1) // streams: the page size is for the fallback
		check(t, items, rev, err)
	})
	for _, page := range []int{1, 7, 53, 100} {
		t.Run(fmt.Sprintf("page=%d", page), func(t *testing.T) {
			items, rev, err := listPages(ctx, s.c, p, page)
			check(t, items, rev, err)
		})
	}
	t.Run("in-process fallback", func(t *testing.T) {
		c, err := srv.InProcessClient()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, _, err := listStream(ctx, c, p); status.Code(err) != codes.Unimplemented {
			t.Fatalf("the in-process adapter streamed (err %v): this test no longer covers the fallback", err)
		}
		items, rev, err := list(ctx, c, p, 7)
		check(t, items, rev, err)
	})
	for name, tc := range map[string]struct {
		prefix string
		page   int
	}{"empty prefix": {"", 1}, "negative page": {p, -1}} {
		t.Run(name, func(t *testing.T) {
			if _, _, err := s.List(ctx, tc.prefix, tc.page); err == nil {
				t.Fatal("List accepted bad arguments")
			}
		})
	}
}

func TestCommitInProcess(t *testing.T) {
	inProcess = true
	defer func() { inProcess = false }()
	t.Run("CompareAndSwap", TestCommitCompareAndSwap)
	t.Run("RejectsBadOps", TestCommitRejectsBadOps)
	t.Run("LargePlanInOneTxn", TestCommitLargePlanInOneTxn)
	t.Run("FencedAfterLeaderChange", TestFencedCommitAfterLeaderChange)
}

// A client with no connection of its own needs the KV to commit through.
func TestNewNeedsAKVForAnInProcessClient(t *testing.T) {
	c, err := srv.InProcessClient()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := New(c, Options{}); err == nil || !strings.Contains(err.Error(), "Options.KV") {
		t.Fatalf("New without KV: %v, want an error naming Options.KV", err)
	}
}

// Revision is the store's revision now: at least that of the last commit,
// and a write's guard is dropped by Unguarded and by nothing else.
func TestRevisionAndUnguarded(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	s := newStore(t)
	p := testPrefix(t)
	rev, err := s.Commit(ctx, nil, Put(p+"a", []byte("1")))
	if err != nil {
		t.Fatal(err)
	}
	now, err := s.Revision(ctx)
	if err != nil || now < rev {
		t.Fatalf("Revision = %d, %v after a commit at %d", now, err, rev)
	}
	g := PutIfModRev(p+"a", []byte("2"), rev)
	if r, ok := g.PutGuard(); !ok || r != rev {
		t.Fatalf("PutGuard = %d, %v; want %d, true", r, ok, rev)
	}
	u := g.Unguarded()
	if _, ok := u.PutGuard(); ok || u.Key() != g.Key() {
		t.Fatalf("Unguarded kept its guard or lost its key: %+v", u)
	}
	// An unguarded put writes over a newer revision; the guarded one is
	// refused.
	if _, err := s.Commit(ctx, nil, Put(p+"a", []byte("3"))); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, nil, g); !IsConflict(err) {
		t.Fatalf("guarded put over a newer revision: %v", err)
	}
	if _, err := s.Commit(ctx, nil, u); err != nil {
		t.Fatalf("unguarded put: %v", err)
	}
	for _, o := range []Op{Delete(p+"a", 1), Check(p+"a", 1), Put(p+"a", nil)} {
		if !reflect.DeepEqual(o.Unguarded(), o) {
			t.Fatalf("Unguarded changed %+v", o)
		}
	}
}
