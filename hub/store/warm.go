package store

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A warm start: a restarted hub must hold every key under its prefix
// before it may lead, and a day of finished workloads makes that list long
// (233,000 keys after a 30-minute soak). With a snapshot file the cache
// lists only keys and revisions, which etcd answers from its in-memory
// index without reading a value, keeps each snapshot item whose key, mod
// and create revision etcd still has (a key's value at a revision never
// changes), and reads only the rest.
//
// A revision names a value only within one etcd history. A restore from a
// backup bumps revisions past any the old history used (hub/backup), and
// a foreign store (another cluster id, or a revision behind the
// snapshot's) is refused; a handful of the newest kept items are read back
// and compared as a last check. Anything wrong means a full list.

// WarmStats says how the cache's first list went.
type WarmStats struct {
	// Warm is true when the snapshot file was used.
	Warm bool
	// Resumed is true when the cache started from the snapshot's items and
	// caught up from its revision with the watch: Replayed changes.
	Resumed  bool
	Replayed int
	// Kept items came from the snapshot; Read were read from etcd (new or
	// changed since the snapshot, plus the few read back to check).
	Kept, Read int
	// Why the snapshot was not used; empty when it was or there was none.
	Why string
	// NoResume says why the cache did not replay the changes since the
	// snapshot (too many, by the churn the file measured) and checked
	// its keys instead; empty when it resumed or did not try.
	NoResume string
}

// maxWarmReads (a variable for tests) bounds the values a warm start reads one key (or run of
// keys) at a time; past it, and past a quarter of the keys, one streamed
// list is cheaper.
var maxWarmReads = 4096

// warmChecks is how many of the newest kept items are read back.
const warmChecks = 16

// warmBatch is the reads per etcd transaction: stock etcd's --max-txn-ops.
const warmBatch = DefaultMaxTxnOps

// errNoSnapshot: no file, nothing to say.
var errNoSnapshot = errors.New("no snapshot file")

// usableSnapshot reads the snapshot file and checks that it is of this
// prefix and of this etcd cluster, and not ahead of it; it returns the
// snapshot and etcd's current revision.
func (c *Cache) usableSnapshot(ctx context.Context) (*snapshot, int64, error) {
	snap, err := readSnapshot(c.snapFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, errNoSnapshot
	}
	if err != nil {
		return nil, 0, err
	}
	if snap.prefix != c.prefix {
		return nil, 0, fmt.Errorf("snapshot of %q, not %q", snap.prefix, c.prefix)
	}
	id, now, err := c.probe(ctx)
	if err != nil {
		return nil, 0, err
	}
	if snap.clusterID != 0 && id != snap.clusterID {
		return nil, 0, fmt.Errorf("snapshot of etcd cluster %x, this is %x", snap.clusterID, id)
	}
	if now < snap.rev {
		return nil, 0, fmt.Errorf("etcd is at revision %d, behind the snapshot's %d: a different or reset store", now, snap.rev)
	}
	return snap, now, nil
}

// longReplay says why resuming from s would replay too many changes to
// be worth it at etcd revision now, or "" when it would not (or the file
// does not know its churn): the revisions since the file times the churn
// it measured, against a quarter of its keys (and maxWarmReads).
func (s *snapshot) longReplay(now int64) string {
	if now <= s.rev {
		return ""
	}
	n, ok := s.churn.changesIn(uint64(now - s.rev))
	if limit := uint64(max(maxWarmReads, int(s.keys)/snapshotShare)); !ok || n <= limit {
		return ""
	}
	return fmt.Sprintf("about %d changes in the %d revisions since the snapshot (it measured %d changes in %d revisions), more than a quarter of its %d keys",
		n, now-s.rev, s.churn.changes, s.churn.revs, s.keys)
}

// probe asks etcd for its cluster id (remembered for the snapshots to
// come) and current revision.
func (c *Cache) probe(ctx context.Context) (clusterID uint64, rev int64, err error) {
	resp, err := c.client.Get(ctx, c.prefix, clientv3.WithCountOnly())
	if err != nil {
		return 0, 0, fmt.Errorf("probe etcd: %w", err)
	}
	c.mu.Lock()
	c.clusterID = resp.Header.GetClusterId()
	c.mu.Unlock()
	return resp.Header.GetClusterId(), resp.Header.GetRevision(), nil
}

// checkedList lists the prefix from a snapshot whose revision etcd has
// compacted: keys and revisions from etcd, values from the snapshot where
// they still hold, the rest read. Any error means a full list.
func (c *Cache) checkedList(ctx context.Context, snap *snapshot) ([]Item, int64, WarmStats, error) {
	var st WarmStats
	keys, rev, err := list(ctx, c.client, c.prefix, c.pageSize, clientv3.WithKeysOnly())
	if err != nil {
		return nil, 0, st, fmt.Errorf("list keys: %w", err)
	}
	// Both are in key order: walk them together.
	items := make([]Item, len(keys))
	var fetch []int // indexes into keys whose values must be read
	j := 0
	for i, k := range keys {
		for j < len(snap.items) && snap.items[j].Key < k.Key {
			j++
		}
		items[i] = k
		if j < len(snap.items) && snap.items[j].Key == k.Key && snap.items[j].ModRev == k.ModRev && snap.items[j].CreateRev == k.CreateRev {
			items[i].Value = snap.items[j].Value
			continue
		}
		fetch = append(fetch, i)
	}
	if len(fetch) > max(maxWarmReads, len(keys)/4) {
		return nil, 0, st, fmt.Errorf("%d of %d keys changed since the snapshot", len(fetch), len(keys))
	}
	if err := c.readValues(ctx, items, fetch, rev); err != nil {
		return nil, 0, st, err
	}
	checked, err := c.spotCheck(ctx, items, fetch)
	if err != nil {
		return nil, 0, st, err
	}
	st = WarmStats{Warm: true, Kept: len(items) - len(fetch), Read: len(fetch) + checked}
	return items, rev, st, nil
}

// spotCheck reads the newest of items (those not in skip, which were just
// read from etcd) back from etcd and compares those still at the same
// revisions (a changed one proves nothing, and the watch brings its
// change). It returns how many it read.
func (c *Cache) spotCheck(ctx context.Context, items []Item, skip []int) (int, error) {
	idx := newestKept(items, skip, warmChecks)
	if len(idx) == 0 {
		return 0, nil
	}
	ops := make([]clientv3.Op, len(idx))
	for n, i := range idx {
		ops[n] = clientv3.OpGet(items[i].Key)
	}
	resp, err := c.client.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return 0, fmt.Errorf("read back: %w", err)
	}
	for n, i := range idx {
		for _, kv := range resp.Responses[n].GetResponseRange().GetKvs() {
			if kv.ModRevision == items[i].ModRev && kv.CreateRevision == items[i].CreateRev && !bytes.Equal(kv.Value, items[i].Value) {
				return 0, fmt.Errorf("key %q at revision %d holds other bytes than the snapshot's: not this store's snapshot", clipKey(items[i].Key), items[i].ModRev)
			}
		}
	}
	return len(idx), nil
}

// newestKept picks up to n of items not in skip, those with the highest
// mod revisions.
func newestKept(items []Item, skip []int, n int) []int {
	skipped := make(map[int]bool, len(skip))
	for _, i := range skip {
		skipped[i] = true
	}
	var top []int // ascending by mod revision, at most n
	for i := range items {
		if skipped[i] || (len(top) == n && items[i].ModRev <= items[top[0]].ModRev) {
			continue
		}
		k, _ := slices.BinarySearchFunc(top, items[i].ModRev, func(j int, rev int64) int { return cmp.Compare(items[j].ModRev, rev) })
		top = slices.Insert(top, k, i)
		if len(top) > n {
			top = top[1:]
		}
	}
	return top
}

// readValues reads the values of items[idx] (ascending) at rev. A run of
// neighbours in the key list is one range read, since at rev no other key
// lies between them; the reads go in transactions of warmBatch.
func (c *Cache) readValues(ctx context.Context, items []Item, idx []int, rev int64) error {
	type run struct{ lo, hi int } // items[lo..hi]
	var runs []run
	for _, i := range idx {
		if n := len(runs); n > 0 && runs[n-1].hi == i-1 {
			runs[n-1].hi = i
			continue
		}
		runs = append(runs, run{i, i})
	}
	for len(runs) > 0 {
		batch := runs[:min(len(runs), warmBatch)]
		runs = runs[len(batch):]
		ops := make([]clientv3.Op, len(batch))
		for b, r := range batch {
			if r.lo == r.hi {
				ops[b] = clientv3.OpGet(items[r.lo].Key, clientv3.WithRev(rev))
			} else {
				ops[b] = clientv3.OpGet(items[r.lo].Key, clientv3.WithRange(items[r.hi].Key+"\x00"), clientv3.WithRev(rev))
			}
		}
		resp, err := c.client.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("read changed keys at revision %d: %w", rev, err)
		}
		for b, r := range batch {
			kvs := resp.Responses[b].GetResponseRange().GetKvs()
			if len(kvs) != r.hi-r.lo+1 {
				return fmt.Errorf("read %d keys from %q at revision %d, listed %d", len(kvs), clipKey(items[r.lo].Key), rev, r.hi-r.lo+1)
			}
			for n, kv := range kvs {
				it := &items[r.lo+n]
				if string(kv.Key) != it.Key || kv.ModRevision != it.ModRev {
					return fmt.Errorf("read %q at revision %d, listed %q at %d", clipKey(string(kv.Key)), kv.ModRevision, clipKey(it.Key), it.ModRev)
				}
				it.Value = kv.Value
			}
		}
	}
	return nil
}

// firstList is the cache's first list. With a usable snapshot file it
// first resumes: the snapshot's items as of its revision, and ready once
// the watch from there has caught up with etcd (resumeAt > 0). When etcd
// has compacted that history, the next call checks the snapshot's items
// against etcd's keys instead (checkedList). Without a usable file, or
// when that fails, it lists in full.
func (c *Cache) firstList(ctx context.Context) (items []Item, rev, resumeAt int64, err error) {
	if c.snapFile == "" {
		items, rev, err = c.coldList(ctx)
		return items, rev, 0, err
	}
	t0 := time.Now()
	snap, now, err := c.usableSnapshot(ctx)
	noResume := "" // why the replay was skipped, for WarmStats
	if err == nil {
		c.mu.Lock()
		resume := !c.resumeTried
		c.resumeTried = true
		c.mu.Unlock()
		if why := snap.longReplay(now); resume && why != "" {
			// Replaying costs several times what listing costs a key:
			// past a quarter of the keys' worth, checking key by key (or
			// one list) is faster.
			resume, noResume = false, why
			c.log.Info("cache snapshot too far behind to replay; checking its keys instead", "prefix", c.prefix, "why", why)
		}
		if resume {
			if _, err = c.spotCheck(ctx, snap.items, nil); err == nil {
				c.mu.Lock()
				c.warm = WarmStats{Warm: true, Resumed: true, Kept: len(snap.items)}
				c.warmSince = t0
				c.mu.Unlock()
				c.log.Info("cache loaded its snapshot; catching up", "prefix", c.prefix, "keys", len(snap.items), "snapshot_rev", snap.rev, "etcd_rev", now,
					"took", time.Since(t0).Round(time.Millisecond).String())
				return snap.items, snap.rev, max(now, snap.rev), nil
			}
		} else {
			var st WarmStats
			if items, rev, st, err = c.checkedList(ctx, snap); err == nil {
				st.NoResume = noResume
				c.mu.Lock()
				c.warm = st
				c.mu.Unlock()
				c.log.Info("cache started from its snapshot, checked key by key", "prefix", c.prefix, "kept", st.Kept, "read", st.Read, "took", time.Since(t0).Round(time.Millisecond).String())
				return items, rev, 0, nil
			}
		}
	}
	if ctx.Err() != nil {
		return nil, 0, 0, ctx.Err()
	}
	if !errors.Is(err, errNoSnapshot) {
		c.log.Warn("cache snapshot not used; listing every key", "file", c.snapFile, "why", err.Error())
		c.mu.Lock()
		c.warm = WarmStats{Why: err.Error(), NoResume: noResume}
		c.mu.Unlock()
	}
	items, rev, err = c.coldList(ctx)
	return items, rev, 0, err
}

// coldList reads every key and value, and learns etcd's cluster id for
// the snapshots to come.
func (c *Cache) coldList(ctx context.Context) ([]Item, int64, error) {
	if c.snapFile != "" {
		_, _, _ = c.probe(ctx) // an unknown id (0) is never compared
	}
	return list(ctx, c.client, c.prefix, c.pageSize)
}

// Warm says how the first list went (see WarmStats).
func (c *Cache) Warm() WarmStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.warm
}

// snapshotChunk is how many items the writer copies per hold of the
// cache's lock, so that writing a large cache never stalls the watch.
const snapshotChunk = 4096

// WriteSnapshot writes the cache's items, exactly as of one revision, to
// its snapshot file (a temporary file, renamed over the old one). It
// copies the items a chunk at a time and then, under one short hold of
// the lock, takes the current item of every key that changed meanwhile
// (the change journal names them). Without fsync: a file lost or torn by
// a crash only means a longer start.
func (c *Cache) WriteSnapshot() (int, error) {
	if c.snapFile == "" {
		return 0, errors.New("store: the cache has no snapshot file")
	}
	items, rev, id, err := c.consistentItems()
	if err != nil {
		return 0, err
	}
	tmp := c.snapFile + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, fmt.Errorf("store: write cache snapshot: %w", err)
	}
	w := newSnapshotWriter(f, snapshotHeader{prefix: c.prefix, clusterID: id, rev: rev, keys: uint64(len(items)), churn: c.measureChurn()})
	for _, it := range items {
		w.add(it)
	}
	err = w.close()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, c.snapFile)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return 0, fmt.Errorf("store: write cache snapshot: %w", err)
	}
	return len(items), nil
}

// churnWindow is the fewest etcd revisions a churn measurement spans;
// over fewer the rate is measured on from the older mark.
const churnWindow = 1000

// measureChurn returns the cache's changes per revision since the mark
// its last measurement (or its first list) left, moving the mark on when
// the span is long enough to stand for the recent rate.
func (c *Cache) measureChurn() churn {
	c.mu.Lock()
	defer c.mu.Unlock()
	pos, rev, m := c.journal.end(), c.rev, c.churnMark
	if rev <= m.rev || pos < m.pos {
		return c.churn
	}
	c.churn = churn{changes: pos - m.pos, revs: uint64(rev - m.rev)}
	if rev-m.rev >= churnWindow {
		c.churnMark = journalMark{pos: pos, rev: rev}
	}
	return c.churn
}

// consistentItems copies the items in key order as of one revision
// without holding the lock for the whole copy.
func (c *Cache) consistentItems() ([]Item, int64, uint64, error) {
	c.mu.Lock()
	if !c.listed {
		c.mu.Unlock()
		return nil, 0, 0, errors.New("store: the cache has not listed yet")
	}
	from := c.journal.end() // changes from here on are re-read below
	items := make([]Item, 0, len(c.items))
	c.mu.Unlock()
	next := c.prefix
	for {
		n := len(items)
		c.mu.Lock()
		c.keys.AscendGreaterOrEqual(next, func(k string) bool {
			items = append(items, c.items[k])
			return len(items)-n < snapshotChunk
		})
		c.mu.Unlock()
		if len(items)-n < snapshotChunk {
			break
		}
		next = items[len(items)-1].Key + "\x00" // the least key after the last
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	rev, id, j := c.rev, c.clusterID, &c.journal
	if from < j.base {
		// More changed during the copy than the journal keeps: copy
		// again, all under the lock (rare: tens of thousands of changes
		// in the time of one copy).
		items = items[:0]
		c.keys.Ascend(func(k string) bool { items = append(items, c.items[k]); return true })
		return items, rev, id, nil
	}
	changed := make(map[string]bool, len(j.keys)-int(from-j.base))
	var fresh []Item
	for _, k := range j.keys[from-j.base:] {
		if changed[k] {
			continue
		}
		changed[k] = true
		if it, ok := c.items[k]; ok {
			fresh = append(fresh, it)
		}
	}
	if len(changed) == 0 {
		return items, rev, id, nil
	}
	slices.SortFunc(fresh, func(a, b Item) int { return strings.Compare(a.Key, b.Key) })
	out := make([]Item, 0, len(items)+len(fresh))
	f := 0
	for _, it := range items {
		if changed[it.Key] {
			continue
		}
		for f < len(fresh) && fresh[f].Key < it.Key {
			out = append(out, fresh[f])
			f++
		}
		out = append(out, it)
	}
	return append(out, fresh[f:]...), rev, id, nil
}

// When the snapshot is written. A restart replays every change since the
// file's revision, so the file is kept within a quarter of the keys' worth
// of changes, but never rewritten more often than snapshotMinGap: each
// write encodes the whole cache, and at high churn (2,000 workloads/s,
// about ten thousand changes a second over 140,000 keys) a 10 s floor
// spent 4% of the hub's process on rewriting it. A file that far behind
// is not replayed at a restart (longReplay): the cache checks its keys
// instead. Variables for tests:
var (
	snapshotTick       = time.Second      // how often the loop looks
	snapshotFirstAfter = 5 * time.Second  // after the cache is ready: a hub restarted again soon finds a fresh file
	snapshotMinGap     = 30 * time.Second // between writes, whatever the changes
	snapshotMinChanges = 1000             // never write for fewer changes than this (besides the periodic write)
)

const snapshotShare = 4 // write once keys/snapshotShare changes piled up

// snapshotLoop writes the snapshot file while the cache runs: once soon
// after it is ready, then when the changes since the last write reach a
// quarter of the keys (at most every snapshotMinGap, and after a pause of
// twenty times the last write's duration) or snapEvery has passed with
// any change, and once more when ctx ends (a clean stop
// leaves a fresh file).
func (c *Cache) snapshotLoop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(snapshotTick)
	defer t.Stop()
	var (
		last       time.Time     // of the last write; zero before the first
		lastTook   time.Duration // how long it took
		lastPos    uint64        // journal position at the last write
		readySince time.Time
	)
	write := func() {
		c.mu.Lock()
		rev, listed := c.rev, c.listed
		pos := c.journal.end()
		c.mu.Unlock()
		if !listed || (!last.IsZero() && pos == lastPos) {
			return
		}
		t0 := time.Now()
		n, err := c.WriteSnapshot()
		if err != nil {
			c.log.Warn("cache snapshot", "err", err)
			return
		}
		last, lastPos, lastTook = t0, pos, time.Since(t0)
		c.log.Debug("cache snapshot written", "file", c.snapFile, "keys", n, "rev", rev, "took", time.Since(t0).Round(time.Millisecond).String())
	}
	for {
		select {
		case <-ctx.Done():
			write()
			return
		case <-t.C:
		}
		if !c.isReady() {
			continue
		}
		if readySince.IsZero() {
			readySince = time.Now()
		}
		c.mu.Lock()
		changes := c.journal.end() - lastPos
		keys := len(c.items)
		c.mu.Unlock()
		since := time.Since(last)
		switch {
		case last.IsZero():
			if time.Since(readySince) >= snapshotFirstAfter {
				write()
			}
		case changes == 0:
		case since >= c.snapEvery,
			// At most a twentieth of the time goes to writing, however
			// fast the keys change and however many there are.
			since >= max(snapshotMinGap, 20*lastTook) && changes >= uint64(max(snapshotMinChanges, keys/snapshotShare)):
			write()
		}
	}
}
