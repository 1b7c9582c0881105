package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// runWarmCache runs a cache with a snapshot file until stop is called
// (which waits for Run, and so for the last snapshot write).
func runWarmCache(t *testing.T, s *Store, prefix, file string) (c *Cache, stop func()) {
	t.Helper()
	c, err := NewCache(s.Client(), prefix, CacheOptions{PageSize: 16, SnapshotFile: file, SnapshotEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-errc
		}
	}
	t.Cleanup(stop)
	select {
	case <-c.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("cache not ready after 10s")
	}
	return c, stop
}

// seedKeys writes n keys under prefix, k000..., and returns the last
// revision.
func seedKeys(t *testing.T, ctx context.Context, s *Store, prefix string, n int) int64 {
	t.Helper()
	var ops []Op
	for i := range n {
		ops = append(ops, Put(fmt.Sprintf("%sk%03d", prefix, i), []byte(fmt.Sprintf("value %d", i))))
	}
	rev, err := s.Commit(ctx, nil, ops...)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// TestCacheWarmStart: a cache stopped cleanly leaves a snapshot; the next
// one starts from it, replays what changed meanwhile from the snapshot's
// revision (a rewrite, a delete, a lone new key and a run of three), holds
// exactly what etcd holds, and goes on watching.
func TestCacheWarmStart(t *testing.T) {
	ctx, s, p, file := warmFixture(t, 30*time.Second)
	seedKeys(t, ctx, s, p, 200)
	a, stop := runWarmCache(t, s, p, file)
	if st := a.Warm(); st.Warm || st.Why != "" {
		t.Fatalf("first start with no file: %+v, want a plain list", st)
	}
	stop()
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("no snapshot after a clean stop: %v", err)
	}

	rev := changeSome(t, ctx, s, p)
	b, _ := runWarmCache(t, s, p, file)
	if st := b.Warm(); !st.Warm || !st.Resumed || st.Kept != 200 || st.Replayed != 6 {
		t.Fatalf("warm start: %+v, want 200 kept and 6 changes replayed", st)
	}
	assertMatchesEtcd(t, ctx, s, b, p, rev)
	rev, err := s.Commit(ctx, nil, Put(p+"k001", []byte("after the start")))
	if err != nil {
		t.Fatal(err)
	}
	assertMatchesEtcd(t, ctx, s, b, p, rev)
}

// warmFixture is what each warm-start test begins with: a deadline, a
// store, a prefix of its own and where the snapshot goes.
func warmFixture(t *testing.T, timeout time.Duration) (context.Context, *Store, string, string) {
	t.Helper()
	return testCtx(t, timeout), newStore(t), testPrefix(t), filepath.Join(t.TempDir(), "cache.snapshot")
}

// changeSome rewrites k005, deletes k007, adds k050x and a run zz1..zz3.
func changeSome(t *testing.T, ctx context.Context, s *Store, p string) int64 {
	t.Helper()
	rev, err := s.Commit(ctx, nil, Put(p+"k005", []byte("rewritten")), DeleteAny(p+"k007"), Put(p+"k050x", []byte("new")),
		Put(p+"zz1", []byte("a")), Put(p+"zz2", []byte("b")), Put(p+"zz3", []byte("c")))
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// TestCacheWarmStartAfterCompaction: when etcd has compacted the history
// after the snapshot's revision, the cache checks the snapshot's items
// against etcd's keys and revisions instead, reads only the changed keys
// (plus a few read back), and holds exactly what etcd holds.
func TestCacheWarmStartAfterCompaction(t *testing.T) {
	ctx, s, p, file := warmFixture(t, 30*time.Second)
	seedKeys(t, ctx, s, p, 200)
	_, stop := runWarmCache(t, s, p, file)
	stop()
	rev := changeSome(t, ctx, s, p)
	// One more write outside the prefix, so the compaction revision is
	// past every change above.
	crev, err := s.Commit(ctx, nil, Put(strings.TrimSuffix(p, "/")+"-other", []byte("x")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client().Compact(ctx, crev); err != nil {
		t.Fatal(err)
	}
	c, _ := runWarmCache(t, s, p, file)
	if st := c.Warm(); !st.Warm || st.Resumed || st.Kept != 198 || st.Read != 5+warmChecks {
		t.Fatalf("warm start after compaction: %+v, want 198 kept and %d read", st, 5+warmChecks)
	}
	assertMatchesEtcd(t, ctx, s, c, p, rev)
}

// TestCacheWarmStartWeighsTheReplay: a snapshot carries the churn its
// cache measured (changes per etcd revision); a restart that would replay
// more than a quarter of the keys' worth of changes by that rate checks
// the keys against etcd instead, and one with fewer resumes.
func TestCacheWarmStartWeighsTheReplay(t *testing.T) {
	defer func(n int) { maxWarmReads = n }(maxWarmReads)
	maxWarmReads = 8
	ctx, s, p, file := warmFixture(t, 60*time.Second)
	seedKeys(t, ctx, s, p, 200)
	a, stop := runWarmCache(t, s, p, file)
	// 20 transactions of 10 changes while the cache runs: 10 a revision.
	var rev int64
	for r := range 20 {
		var ops []Op
		for i := range 10 {
			ops = append(ops, Put(fmt.Sprintf("%sk%03d", p, 100+i), []byte(fmt.Sprint("round ", r))))
		}
		var err error
		if rev, err = s.Commit(ctx, nil, ops...); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.WaitForRevision(ctx, rev); err != nil {
		t.Fatal(err)
	}
	stop()
	snap, err := readSnapshot(file)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := snap.churn.changesIn(100); !ok || got != 1000 || snap.keys != 200 {
		t.Fatalf("snapshot header %+v: want 200 keys and 10 changes a revision", snap.snapshotHeader)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	rewrite := func(n int) int64 { // n revisions, each rewriting one of k000..k002
		t.Helper()
		var rev int64
		for i := range n {
			var err error
			if rev, err = s.Commit(ctx, nil, Put(fmt.Sprintf("%sk%03d", p, i%3), []byte(fmt.Sprint("later ", i)))); err != nil {
				t.Fatal(err)
			}
		}
		return rev
	}

	// 2 revisions: about 20 changes by the file's churn, under 50.
	rev = rewrite(2)
	b, stopB := runWarmCache(t, s, p, file)
	if st := b.Warm(); !st.Resumed || st.NoResume != "" || st.Replayed != 2 {
		t.Fatalf("after 2 revisions: %+v, want a resume replaying 2 changes", st)
	}
	assertMatchesEtcd(t, ctx, s, b, p, rev)
	stopB()

	// 60 revisions since the first file: about 600 changes by its churn,
	// far more than a quarter of 200 keys, though only 3 keys changed.
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	rev = rewrite(60)
	c, _ := runWarmCache(t, s, p, file)
	st := c.Warm()
	if !st.Warm || st.Resumed || !strings.Contains(st.NoResume, "more than a quarter of its 200 keys") || st.Kept != 197 || st.Read != 3+warmChecks {
		t.Fatalf("after 60 revisions: %+v, want the keys checked (197 kept, %d read) and why not resumed", st, 3+warmChecks)
	}
	assertMatchesEtcd(t, ctx, s, c, p, rev)
}

// TestCacheSnapshotIsOneRevision: a snapshot written while keys change
// holds the items exactly as of its revision.
func TestCacheSnapshotIsOneRevision(t *testing.T) {
	ctx, s, p, file := warmFixture(t, 60*time.Second)
	seedKeys(t, ctx, s, p, 300)
	c, _ := runWarmCache(t, s, p, file)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 300; i++ {
			k := fmt.Sprintf("%sk%03d", p, (i*7)%300)
			if i%3 == 0 {
				_, _ = s.Commit(ctx, nil, DeleteAny(k))
			} else {
				_, _ = s.Commit(ctx, nil, Put(k, []byte(fmt.Sprint("v", i))), Put(fmt.Sprintf("%sn%03d", p, i), []byte("n")))
			}
		}
	}()
	for range 5 {
		if _, err := c.WriteSnapshot(); err != nil {
			t.Fatal(err)
		}
		snap, err := readSnapshot(file)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := s.Client().Get(ctx, p, clientv3.WithPrefix(), clientv3.WithRev(snap.rev))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != len(snap.items) {
			t.Fatalf("snapshot at rev %d holds %d items, etcd held %d", snap.rev, len(snap.items), len(resp.Kvs))
		}
		for i, kv := range resp.Kvs {
			if it := snap.items[i]; it.Key != string(kv.Key) || it.ModRev != kv.ModRevision || !bytes.Equal(it.Value, kv.Value) {
				t.Fatalf("snapshot at rev %d: item %d is %s@%d, etcd had %s@%d", snap.rev, i, it.Key, it.ModRev, kv.Key, kv.ModRevision)
			}
		}
	}
	<-done
}

// TestCacheWarmStartRefusesWhatItCannotTrust: each kind of unusable file
// is named in a warning and the cache lists in full instead, holding
// exactly what etcd holds.
func TestCacheWarmStartRefusesWhatItCannotTrust(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	s := newStore(t)
	p := testPrefix(t)
	seedKeys(t, ctx, s, p, 40)
	good := filepath.Join(t.TempDir(), "good.snapshot")
	_, stop := runWarmCache(t, s, p, good)
	stop()
	snap, err := readSnapshot(good)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	// rewrite encodes snap with a change made by edit.
	rewrite := func(edit func(*snapshot)) []byte {
		c := *snap
		c.items = append([]Item(nil), snap.items...)
		edit(&c)
		var buf bytes.Buffer
		c.keys = uint64(len(c.items))
		w := newSnapshotWriter(&buf, c.snapshotHeader)
		for _, it := range c.items {
			w.add(it)
		}
		if err := w.close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	for _, tc := range []struct {
		name string
		file []byte
		why  string
	}{
		{"torn", data[:len(data)-7], "checksum"},
		{"not a snapshot", []byte("hello, world\n"), "magic"},
		{"another prefix", rewrite(func(s *snapshot) {
			s.prefix = "/elsewhere/"
			for i := range s.items {
				s.items[i].Key = "/elsewhere/" + strings.TrimPrefix(s.items[i].Key, p)
			}
		}), "snapshot of"},
		{"another etcd cluster", rewrite(func(s *snapshot) { s.clusterID ^= 0xdead }), "etcd cluster"},
		{"a store behind the snapshot", rewrite(func(s *snapshot) { s.rev += 1 << 40 }), "behind the snapshot"},
		{"other bytes at the same revisions", rewrite(func(s *snapshot) {
			for i := range s.items {
				s.items[i].Value = []byte("not what etcd holds")
			}
		}), "other bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "cache.snapshot")
			if err := os.WriteFile(file, tc.file, 0o600); err != nil {
				t.Fatal(err)
			}
			c, _ := runWarmCache(t, s, p, file)
			if st := c.Warm(); st.Warm || !strings.Contains(st.Why, tc.why) {
				t.Fatalf("%+v, want a full list because of %q", st, tc.why)
			}
			assertMatchesEtcd(t, ctx, s, c, p, 0)
		})
	}
	t.Run("too much changed", func(t *testing.T) {
		defer func(n int) { maxWarmReads = n }(maxWarmReads)
		maxWarmReads = 2
		file := filepath.Join(t.TempDir(), "cache.snapshot")
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		rev := seedKeys(t, ctx, s, p, 40) // rewrites all 40
		crev, err := s.Commit(ctx, nil, Put(strings.TrimSuffix(p, "/")+"-other", []byte("x")))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Client().Compact(ctx, crev); err != nil { // no resuming
			t.Fatal(err)
		}
		c, _ := runWarmCache(t, s, p, file)
		if st := c.Warm(); st.Warm || !strings.Contains(st.Why, "40 of 40 keys changed") {
			t.Fatalf("%+v, want a full list", st)
		}
		assertMatchesEtcd(t, ctx, s, c, p, rev)
	})
}

// TestCacheSnapshotWrites: the cache writes its snapshot soon after it is
// ready, again once a quarter of its keys' worth of changes piled up, and
// not for fewer (the periodic write aside, an hour here).
func TestCacheSnapshotWrites(t *testing.T) {
	defer func(tick, first, gap time.Duration, minChanges int) {
		snapshotTick, snapshotFirstAfter, snapshotMinGap, snapshotMinChanges = tick, first, gap, minChanges
	}(snapshotTick, snapshotFirstAfter, snapshotMinGap, snapshotMinChanges)
	snapshotTick, snapshotFirstAfter, snapshotMinGap, snapshotMinChanges = 10*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond, 5
	ctx, s, p, file := warmFixture(t, 30*time.Second)
	rev := seedKeys(t, ctx, s, p, 100)
	runWarmCache(t, s, p, file)
	waitSnapshot := func(what string, atLeast int64) *snapshot {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if snap, err := readSnapshot(file); err == nil && snap.rev >= atLeast {
				return snap
			}
			if time.Now().After(deadline) {
				t.Fatalf("no snapshot at revision %d or later %s", atLeast, what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	first := waitSnapshot("soon after the start", rev)
	if len(first.items) != 100 {
		t.Fatalf("first snapshot holds %d items, want 100", len(first.items))
	}
	// 10 changes of 100 keys: fewer than a quarter, so no write.
	var ops []Op
	for i := range 10 {
		ops = append(ops, Put(fmt.Sprintf("%sk%03d", p, i), []byte("changed")))
	}
	few, err := s.Commit(ctx, nil, ops...)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if snap, err := readSnapshot(file); err != nil || snap.rev >= few {
		t.Fatalf("a snapshot was written for 10 changes of 100 keys (%v)", err)
	}
	// 20 more: 30 in all, past a quarter.
	ops = ops[:0]
	for i := range 20 {
		ops = append(ops, Put(fmt.Sprintf("%sk%03d", p, 50+i), []byte("changed")))
	}
	many, err := s.Commit(ctx, nil, ops...)
	if err != nil {
		t.Fatal(err)
	}
	waitSnapshot("after a quarter of the keys changed", many)
}

// FuzzDecodeSnapshot: no input makes the decoder panic, and what it
// accepts is a well-formed snapshot.
func FuzzDecodeSnapshot(f *testing.F) {
	var buf bytes.Buffer
	w := newSnapshotWriter(&buf, snapshotHeader{prefix: "/p/", clusterID: 7, rev: 42, keys: 2, churn: churn{changes: 30, revs: 4}})
	w.add(Item{Key: "/p/a", Value: []byte("x"), ModRev: 3, CreateRev: 2})
	w.add(Item{Key: "/p/b", ModRev: 5, CreateRev: 5})
	if err := w.close(); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:buf.Len()-4]) // the body: the target adds its checksum
	f.Add([]byte(snapshotMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		// As found, and with a checksum that matches, so that the
		// fuzzer reaches the parser behind it.
		for _, in := range [][]byte{data, binary.LittleEndian.AppendUint32(bytes.Clone(data), crc32.Checksum(data, castagnoli))} {
			s, err := decodeSnapshot(in)
			if err != nil {
				continue
			}
			for i, it := range s.items {
				if !strings.HasPrefix(it.Key, s.prefix) || it.CreateRev <= 0 || it.CreateRev > it.ModRev || (i > 0 && s.items[i-1].Key >= it.Key) {
					t.Fatalf("accepted a bad entry %d: %+v", i, it)
				}
			}
		}
	})
}
