package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// startCache runs a cache of prefix until the test ends.
func startCache(t *testing.T, s *Store, prefix string) (*Cache, context.CancelFunc, <-chan error) {
	t.Helper()
	c, err := NewCache(s.Client(), prefix, CacheOptions{PageSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-errc
	})
	select {
	case <-c.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("cache not ready after 5s")
	}
	return c, cancel, errc
}

// assertMatchesEtcd compares the cache snapshot with a fresh list.
func assertMatchesEtcd(t *testing.T, ctx context.Context, s *Store, c *Cache, prefix string, atLeast int64) {
	t.Helper()
	if err := c.WaitForRevision(ctx, atLeast); err != nil {
		t.Fatal(err)
	}
	items, _, err := s.List(ctx, prefix, 0)
	if err != nil {
		t.Fatal(err)
	}
	snap, rev := c.Snapshot()
	if rev < atLeast {
		t.Fatalf("snapshot rev %d < %d", rev, atLeast)
	}
	if len(snap) != len(items) {
		t.Fatalf("cache has %d keys, etcd has %d", len(snap), len(items))
	}
	for _, it := range items {
		got, ok := snap[it.Key]
		if !ok || !bytes.Equal(got.Value, it.Value) || got.ModRev != it.ModRev || got.CreateRev != it.CreateRev {
			t.Fatalf("cache %s = %+v (present %v), etcd = %+v", it.Key, got, ok, it)
		}
	}
	assertDescends(t, c, prefix, items)
	for _, it := range items {
		if !c.HasPrefix(it.Key) || !c.HasPrefix(it.Key[:len(it.Key)-1]) {
			t.Fatalf("HasPrefix misses cached key %s", it.Key)
		}
	}
	if c.HasPrefix(prefix+"~no-such-key") || c.HasPrefix("\xff") {
		t.Fatal("HasPrefix finds a prefix no cached key has")
	}
}

// assertDescends checks Descend against etcd's ascending list: the whole
// prefix in reverse, from below each key, and in bounded batches.
func assertDescends(t *testing.T, c *Cache, prefix string, items []Item) {
	t.Helper()
	keys := func(below string, max int) []string {
		var out []string
		c.Descend(prefix, below, max, func(it Item) bool {
			out = append(out, it.Key)
			return true
		})
		return out
	}
	want := make([]string, 0, len(items))
	for i := len(items) - 1; i >= 0; i-- {
		want = append(want, items[i].Key)
	}
	if got := keys("", len(items)+1); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("Descend(%q) = %v, want %v", prefix, got, want)
	}
	for i, k := range want {
		if got := keys(k, len(items)); strings.Join(got, ",") != strings.Join(want[i+1:], ",") {
			t.Fatalf("Descend below %q = %v, want %v", k, got, want[i+1:])
		}
	}
	// Batches of 3 (continuing below the last key) give the same order.
	var paged []string
	for below := ""; ; {
		batch := keys(below, 3)
		paged = append(paged, batch...)
		if len(batch) < 3 {
			break
		}
		below = batch[len(batch)-1]
	}
	if strings.Join(paged, ",") != strings.Join(want, ",") {
		t.Fatalf("Descend in batches of 3 = %v, want %v", paged, want)
	}
}

func TestCacheConvergesAfterRandomWrites(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	s := newStore(t)
	p := testPrefix(t)
	// Keys that exist before the cache starts are listed, not watched.
	for i := 0; i < 40; i++ {
		if _, err := s.Commit(ctx, nil, Put(fmt.Sprintf("%sk%02d", p, i), []byte("pre"))); err != nil {
			t.Fatal(err)
		}
	}
	c, _, _ := startCache(t, s, p)
	if snap, _ := c.Snapshot(); len(snap) != 40 {
		t.Fatalf("initial snapshot has %d keys, want 40", len(snap))
	}

	// A subscriber that mirrors the event stream.
	events := c.Events()
	mirror := map[string][]byte{}
	snap, _ := c.Snapshot()
	for k, it := range snap {
		mirror[k] = it.Value
	}
	var mirrorMu sync.Mutex
	var lastSeen int64
	go func() {
		for ev := range events {
			mirrorMu.Lock()
			switch ev.Type {
			case EventPut:
				mirror[ev.Key] = ev.Value
			case EventDelete:
				delete(mirror, ev.Key)
			}
			lastSeen = max(lastSeen, ev.ModRev)
			mirrorMu.Unlock()
		}
	}()

	rng := rand.New(rand.NewPCG(1, 2))
	var last int64
	puts, dels := 0, 0
	for i := 0; i < 1000; i++ {
		key := fmt.Sprintf("%sk%02d", p, rng.IntN(80))
		var (
			rev int64
			err error
		)
		if rng.IntN(3) == 0 {
			rev, err = s.Commit(ctx, nil, DeleteAny(key))
			dels++
		} else {
			rev, err = s.Commit(ctx, nil, Put(key, []byte(fmt.Sprintf("v%d", i))))
			puts++
		}
		if err != nil {
			t.Fatal(err)
		}
		last = rev
	}
	// A write outside the prefix moves etcd's revision past anything the
	// watch delivers; WaitForRevision must still reach it.
	outside, err := s.Commit(ctx, nil, Put("/elsewhere/"+p, []byte("x")))
	if err != nil {
		t.Fatal(err)
	}
	assertMatchesEtcd(t, ctx, s, c, p, max(last, outside))
	t.Logf("%d puts, %d deletes; cache at rev %d", puts, dels, c.Rev())

	// The event mirror converges to the same contents.
	items, _, _ := s.List(ctx, p, 0)
	deadline := time.Now().Add(5 * time.Second)
	for {
		mirrorMu.Lock()
		ok := len(mirror) == len(items)
		for _, it := range items {
			ok = ok && bytes.Equal(mirror[it.Key], it.Value)
		}
		mirrorMu.Unlock()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("event mirror did not converge: %d keys vs %d in etcd", len(mirror), len(items))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCacheSurvivesCompaction(t *testing.T) {
	ctx := testCtx(t, 15*time.Second)
	s := newStore(t)
	p := testPrefix(t)
	for i := 0; i < 30; i++ {
		if _, err := s.Commit(ctx, nil, Put(fmt.Sprintf("%s%02d", p, i), []byte("v0"))); err != nil {
			t.Fatal(err)
		}
	}
	c, err := NewCache(s.Client(), p, CacheOptions{PageSize: 7})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- c.Run(runCtx) }()
	<-c.Ready()
	stop()
	<-errc
	stale := c.Rev()

	// While the cache is stopped: change, delete and add keys, then compact
	// past the cache's revision so it cannot resume its watch.
	var last int64
	for i := 0; i < 30; i++ {
		key := fmt.Sprintf("%s%02d", p, i)
		var err error
		switch i % 3 {
		case 0:
			last, err = s.Commit(ctx, nil, DeleteAny(key))
		case 1:
			last, err = s.Commit(ctx, nil, Put(key, []byte("v1")))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	last, err = s.Commit(ctx, nil, Put(p+"new", []byte("n")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client().Compact(ctx, last); err != nil {
		t.Fatal(err)
	}

	runCtx2, stop2 := context.WithCancel(ctx)
	defer stop2()
	ch := c.Events()
	go func() { errc <- c.Run(runCtx2) }()
	assertMatchesEtcd(t, ctx, s, c, p, last)
	if c.Relists() < 1 {
		t.Fatalf("Relists() = %d after resuming from compacted rev %d", c.Relists(), stale)
	}
	// The relist is reported as events: 10 deletes, 10 changes, 1 new key.
	got := map[EventType]int{}
	timeout := time.After(5 * time.Second)
	for got[EventPut]+got[EventDelete] < 21 {
		select {
		case ev := <-ch:
			got[ev.Type]++
		case <-timeout:
			t.Fatalf("relist events so far %v, want 11 puts and 10 deletes", got)
		}
	}
	if got[EventPut] != 11 || got[EventDelete] != 10 {
		t.Fatalf("relist events %v, want 11 puts and 10 deletes", got)
	}
	// And the cache keeps following live writes after the relist.
	rev, err := s.Commit(ctx, nil, Put(p+"after", []byte("a")))
	if err != nil {
		t.Fatal(err)
	}
	assertMatchesEtcd(t, ctx, s, c, p, rev)
}

func TestCacheFollowsEtcdRestart(t *testing.T) {
	ctx := testCtx(t, 15*time.Second)
	s := newStore(t)
	p := testPrefix(t)
	c, _, _ := startCache(t, s, p)
	if _, err := s.Commit(ctx, nil, Put(p+"a", []byte("1"))); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	var rev int64
	var err error
	for i := 0; i < 100; i++ {
		if rev, err = s.Commit(ctx, nil, Put(p+"b", []byte("2"))); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("write after etcd restart: %v", err)
	}
	assertMatchesEtcd(t, ctx, s, c, p, rev)
}

func TestCacheSlowSubscriberIsCoalesced(t *testing.T) {
	ctx := testCtx(t, 15*time.Second)
	s := newStore(t)
	p := testPrefix(t)
	c, _, _ := startCache(t, s, p)
	ch, cancelSub := c.Subscribe()
	// Nobody reads ch while 300 writes hit 5 keys: the cache must keep up.
	var last int64
	for i := 0; i < 300; i++ {
		rev, err := s.Commit(ctx, nil, Put(fmt.Sprintf("%s%d", p, i%5), []byte(fmt.Sprintf("v%03d", i))))
		if err != nil {
			t.Fatal(err)
		}
		last = rev
	}
	if err := c.WaitForRevision(ctx, last); err != nil {
		t.Fatalf("watcher blocked by a slow subscriber: %v", err)
	}
	// Now drain: the reader ends with the latest value of every key, and
	// got far fewer than 300 events.
	final := map[string]string{}
	n := 0
	for len(final) < 5 || !allLatest(final) {
		select {
		case ev := <-ch:
			n++
			final[ev.Key] = string(ev.Value)
		case <-time.After(3 * time.Second):
			t.Fatalf("after %d events final = %v, want v295..v299", n, final)
		}
	}
	if n >= 300 {
		t.Fatalf("slow reader got %d events, want them coalesced (< 300)", n)
	}
	t.Logf("slow subscriber received %d events for 300 writes", n)
	cancelSub()
	select {
	case _, ok := <-ch:
		for ok {
			_, ok = <-ch
		}
	case <-time.After(2 * time.Second):
		t.Fatal("channel not closed after cancel")
	}
}

func allLatest(m map[string]string) bool {
	for _, v := range m {
		if !strings.HasPrefix(v, "v29") || v < "v295" {
			return false
		}
	}
	return true
}

func TestCacheArgumentsAndDoubleRun(t *testing.T) {
	s := newStore(t)
	if _, err := NewCache(nil, "/x/"); err == nil {
		t.Fatal("NewCache accepted a nil client")
	}
	if _, err := NewCache(s.Client(), ""); err == nil {
		t.Fatal("NewCache accepted an empty prefix")
	}
	if _, err := NewCache(s.Client(), "/x/", CacheOptions{PageSize: -1}); err == nil {
		t.Fatal("NewCache accepted a negative page size")
	}
	c, _, _ := startCache(t, s, testPrefix(t))
	if err := c.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("second Run: err = %v, want already running", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := c.WaitForRevision(ctx, 1<<40); err == nil {
		t.Fatal("WaitForRevision of a future revision returned nil")
	}
}

// TestWatchEnd: only lost history makes the cache list again; a watch the
// server cancelled for another reason (no leader during an etcd election,
// a member behind the revision asked for) resumes where it was.
func TestWatchEnd(t *testing.T) {
	for _, tc := range []struct {
		name         string
		wr           clientv3.WatchResponse
		end, relists bool
	}{
		{"events", clientv3.WatchResponse{}, false, false},
		{"compacted", clientv3.WatchResponse{CompactRevision: 42, Canceled: true}, true, true},
		{"cancelled for another reason", clientv3.WatchResponse{Canceled: true}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := watchEnd(tc.wr, 7)
			if (err != nil) != tc.end || errors.Is(err, errRelist) != tc.relists {
				t.Fatalf("watchEnd = %v; want an end %v, a relist %v", err, tc.end, tc.relists)
			}
		})
	}
}

// The cache's events say which incarnation of a key they are about and
// whether they are its creation: a put of a new key is Fresh with its own
// revision as create revision, later puts are not, and a delete carries
// the create revision of what it deleted.
func TestCacheEventsCarryTheCreation(t *testing.T) {
	ctx := testCtx(t, 15*time.Second)
	s := newStore(t)
	p := testPrefix(t)
	c, _, _ := startCache(t, s, p)
	ch, cancelSub := c.Subscribe()
	defer cancelSub()
	recv := func() Event {
		t.Helper()
		select {
		case ev := <-ch:
			return ev
		case <-time.After(5 * time.Second):
			t.Fatal("no event after 5s")
			return Event{}
		}
	}
	commit := func(op Op) int64 {
		t.Helper()
		rev, err := s.Commit(ctx, nil, op)
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	created := commit(Put(p+"k", []byte("1")))
	if ev := recv(); !ev.Fresh || ev.CreateRev != created || ev.ModRev != created {
		t.Fatalf("create: %+v, want Fresh with create revision %d", ev, created)
	}
	changed := commit(Put(p+"k", []byte("2")))
	if ev := recv(); ev.Fresh || ev.CreateRev != created || ev.ModRev != changed {
		t.Fatalf("change: %+v, want not Fresh, create revision %d", ev, created)
	}
	deleted := commit(DeleteAny(p + "k"))
	if ev := recv(); ev.Type != EventDelete || ev.Fresh || ev.CreateRev != created || ev.ModRev != deleted {
		t.Fatalf("delete: %+v, want the deleted incarnation's create revision %d", ev, created)
	}
	again := commit(Put(p+"k", []byte("3")))
	if ev := recv(); !ev.Fresh || ev.CreateRev != again {
		t.Fatalf("created again: %+v, want Fresh with create revision %d", ev, again)
	}
}

// TestCacheKeepsOneCopyOfARewrittenKey: the item a rewritten key holds
// names it with the string the map and the ordered index already hold,
// not a fresh copy per write (each copy is one more object in the hub's
// heap for every collection to mark, for every stored key).
func TestCacheKeepsOneCopyOfARewrittenKey(t *testing.T) {
	s := newStore(t)
	prefix := testPrefix(t)
	ctx := testCtx(t, 10*time.Second)
	c, _, _ := startCache(t, s, prefix)
	key := prefix + "w1"
	var rev int64
	for i := range 4 {
		r, err := s.Commit(ctx, nil, Put(key, []byte(fmt.Sprintf("v%d", i))))
		if err != nil {
			t.Fatal(err)
		}
		rev = r
	}
	if err := c.WaitForRevision(ctx, rev); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	it, ok := c.items[key]
	if !ok || string(it.Value) != "v3" {
		t.Fatalf("cache holds %+v, want %s = v3", it, key)
	}
	for k := range c.items {
		if k == key && unsafe.StringData(k) != unsafe.StringData(it.Key) {
			t.Error("the map's key and the item's are two copies")
		}
	}
	inIndex, _ := c.keys.Get(key)
	if unsafe.StringData(inIndex) != unsafe.StringData(it.Key) {
		t.Error("the ordered index's key and the item's are two copies")
	}
}
