package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/google/btree"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meridian-gpu/meridian/internal/ctxtime"
)

// EventType says whether a key was written or removed.
type EventType int

// Event types.
const (
	EventPut EventType = iota + 1
	EventDelete
)

func (t EventType) String() string {
	switch t {
	case EventPut:
		return "PUT"
	case EventDelete:
		return "DELETE"
	}
	return "UNKNOWN"
}

// Event is one change seen by a Cache. For a delete, Value is nil and ModRev
// is the revision of the delete (or, after a relist, the list revision).
type Event struct {
	Type   EventType
	Key    string
	Value  []byte
	ModRev int64
	// CreateRev is the create revision of the key's incarnation the
	// event is about: for a delete, the deleted one's (0 when unknown).
	CreateRev int64
	// Fresh says the incarnation's creation is among the changes the
	// event stands for: it is the creation, or a subscriber folded the
	// creation into it. So a subscriber that started at a revision below
	// CreateRev saw the key before this event exactly when Fresh is
	// false, and needs no set of the keys it has seen.
	Fresh bool
}

// Cache mirrors every key under one prefix in memory. Build it with NewCache
// and drive it with Run. All methods are safe for concurrent use. Values in
// snapshots and events are shared with the cache: treat them as read-only.
type Cache struct {
	client   *clientv3.Client
	prefix   string
	pageSize int
	log      *slog.Logger

	mu      sync.Mutex
	items   map[string]Item
	keys    *btree.BTreeG[string] // items' keys in order, for Descend
	rev     int64                 // every change up to rev is applied
	listed  bool
	running bool
	ready   chan struct{}
	revCond chan struct{} // closed and replaced whenever rev advances
	subs    map[*subscriber]struct{}
	notify  map[chan struct{}]struct{} // Notify's channels; sent to and closed under mu only
	relists int
	journal journal // changed keys, for Delta

	// The snapshot file (warm.go): where, how often, the etcd cluster it
	// mirrors, and how the first list went.
	snapFile    string
	snapEvery   time.Duration
	clusterID   uint64
	warm        WarmStats
	resumeTried bool
	warmSince   time.Time   // when the resume began
	churnMark   journalMark // where the churn written into the next snapshot is measured from
	churn       churn       // the last measurement
}

// journalMark is a journal position and the revision the cache had
// reached there.
type journalMark struct {
	pos uint64
	rev int64
}

// CacheOptions tune a Cache.
type CacheOptions struct {
	// PageSize is the list page size; 0 means DefaultPageSize.
	PageSize int
	// Logger receives relist and watch-restart logs; nil drops them.
	Logger *slog.Logger
	// SnapshotFile, when set, is where the cache keeps a copy of its items
	// (every SnapshotEvery, and when Run returns) and what its first list
	// starts from: only keys that changed since are read from etcd
	// (warm.go). The file's directory must exist.
	SnapshotFile string
	// SnapshotEvery is the longest time between snapshot writes while keys
	// change; 0 means DefaultSnapshotEvery. The cache also writes once soon
	// after it is ready, and whenever a quarter of its keys' worth of
	// changes piled up (warm.go).
	SnapshotEvery time.Duration
}

// DefaultSnapshotEvery is the longest time between a cache's snapshot
// writes while keys change. A write costs a sequential write of the
// cache's size (about 140 MB for 233,000 keys, a fraction of a second).
const DefaultSnapshotEvery = time.Minute

// NewCache returns a cache of the keys under prefix. It does nothing until
// Run is called.
func NewCache(client *clientv3.Client, prefix string, opts ...CacheOptions) (*Cache, error) {
	if client == nil {
		return nil, errors.New("store: NewCache: client is nil")
	}
	if prefix == "" {
		return nil, errors.New("store: NewCache: prefix is empty")
	}
	var o CacheOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.PageSize < 0 {
		return nil, fmt.Errorf("store: CacheOptions.PageSize %d is negative", o.PageSize)
	}
	if o.SnapshotEvery < 0 {
		return nil, fmt.Errorf("store: CacheOptions.SnapshotEvery %s is negative", o.SnapshotEvery)
	}
	if o.SnapshotEvery == 0 {
		o.SnapshotEvery = DefaultSnapshotEvery
	}
	l := o.Logger
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return &Cache{
		client: client, prefix: prefix, pageSize: o.PageSize, log: l, snapFile: o.SnapshotFile, snapEvery: o.SnapshotEvery,
		items: map[string]Item{}, keys: newKeyIndex(), ready: make(chan struct{}), revCond: make(chan struct{}),
		subs: map[*subscriber]struct{}{}, notify: map[chan struct{}]struct{}{},
	}, nil
}

// errRelist asks Run to list again (the watch start revision was
// compacted).
var errRelist = errors.New("relist needed")

// Run lists the prefix and then watches it until ctx ends, relisting when
// the needed revision has been compacted. It returns ctx's error. Run may be
// called again after it returns: it then resumes from the revision it had
// reached (relisting if that was compacted meanwhile). Subscriptions are
// closed when Run returns. Only one Run may be active at a time.
func (c *Cache) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return errors.New("store: Cache.Run is already running")
	}
	c.running = true
	needList := !c.listed
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.running = false
		for s := range c.subs {
			s.close()
			delete(c.subs, s)
		}
		for ch := range c.notify {
			close(ch)
			delete(c.notify, ch)
		}
		c.mu.Unlock()
	}()
	if c.snapFile != "" {
		done := make(chan struct{})
		go c.snapshotLoop(ctx, done)
		defer func() { <-done }() // the last write, after ctx ended
	}

	backoff := 50 * time.Millisecond
	for {
		if needList {
			if err := c.relist(ctx); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				c.log.Warn("cache relist failed", "prefix", c.prefix, "err", err)
				if !ctxtime.Sleep(ctx, backoff) {
					return ctx.Err()
				}
				backoff = min(2*backoff, 2*time.Second)
				continue
			}
			backoff = 50 * time.Millisecond
		}
		err := c.watch(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		needList = errors.Is(err, errRelist)
		c.log.Info("cache watch restarting", "prefix", c.prefix, "relist", needList, "err", err)
		if !needList && !ctxtime.Sleep(ctx, backoff) {
			return ctx.Err()
		}
	}
}

// relist replaces the cache contents with a fresh list and emits the
// difference as events.
func (c *Cache) relist(ctx context.Context) error {
	t0 := time.Now()
	var (
		items         []Item
		rev, resumeAt int64
		err           error
	)
	if !c.isReady() {
		items, rev, resumeAt, err = c.firstList(ctx)
	} else {
		items, rev, err = list(ctx, c.client, c.prefix, c.pageSize)
	}
	if err != nil {
		return err
	}
	fresh := make(map[string]Item, len(items))
	for _, it := range items {
		fresh[it.Key] = it
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, old := range c.items {
		if _, ok := fresh[k]; !ok {
			c.publishLocked(Event{Type: EventDelete, Key: k, ModRev: rev, CreateRev: old.CreateRev})
		}
	}
	for _, it := range items {
		if old, ok := c.items[it.Key]; !ok || old.ModRev != it.ModRev {
			// A relist sees only the result: the key is new to the cache,
			// or another incarnation than the one it held.
			created := !ok || old.CreateRev != it.CreateRev
			c.publishLocked(Event{Type: EventPut, Key: it.Key, Value: it.Value, ModRev: it.ModRev, CreateRev: it.CreateRev, Fresh: created})
		}
	}
	c.items = fresh
	c.keys = newKeyIndex()
	for k := range fresh {
		c.keys.ReplaceOrInsert(k)
	}
	if c.listed {
		c.relists++
	} else {
		c.churnMark = journalMark{pos: c.journal.end(), rev: rev}
	}
	c.listed = true
	c.advanceLocked(rev)
	if resumeAt > 0 {
		// From a snapshot: ready once the watch has caught up with the
		// revision etcd had at the start (WaitForRevision asks etcd for
		// progress, in case the last changes lie outside the prefix).
		go func() {
			if c.WaitForRevision(ctx, resumeAt) != nil {
				return
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.markReadyLocked() {
				c.log.Info("cache caught up from its snapshot", "prefix", c.prefix, "keys", len(c.items), "rev", c.rev, "replayed", c.warm.Replayed,
					"took", time.Since(c.warmSince).Round(time.Millisecond).String())
			}
		}()
		return nil
	}
	c.markReadyLocked()
	// At start this is what a hub waits for before it may lead: say how
	// long it took.
	c.log.Info("cache listed", "prefix", c.prefix, "keys", len(fresh), "rev", rev, "took", time.Since(t0).Round(time.Millisecond).String())
	return nil
}

// markReadyLocked closes ready, reporting whether this call did.
func (c *Cache) markReadyLocked() bool {
	if c.isReady() {
		return false
	}
	close(c.ready)
	return true
}

func (c *Cache) isReady() bool {
	select {
	case <-c.ready:
		return true
	default:
		return false
	}
}

// watchCtx gives every watch and progress request of this cache the same
// gRPC stream (the client groups them by outgoing metadata).
func watchCtx(ctx context.Context) context.Context { return clientv3.WithRequireLeader(ctx) }

func (c *Cache) watch(ctx context.Context) error {
	c.mu.Lock()
	from := c.rev + 1
	c.mu.Unlock()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := c.client.Watch(watchCtx(wctx), c.prefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithProgressNotify())
	for wr := range wch {
		if err := watchEnd(wr, from); err != nil {
			return err
		}
		c.apply(wr)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("watch channel closed")
}

// watchEnd says whether a watch response ends the watch: errRelist
// (wrapped) when etcd compacted the history the watch needs, a plain error
// (watch again from the revision reached) for any other cancellation or
// failure, nil for events and progress.
func watchEnd(wr clientv3.WatchResponse, from int64) error {
	if wr.CompactRevision != 0 || errors.Is(wr.Err(), rpctypes.ErrCompacted) {
		return fmt.Errorf("watch from rev %d: compacted at %d: %w", from, wr.CompactRevision, errRelist)
	}
	if wr.Canceled {
		// Only lost history needs a list. A watch cancelled for another
		// reason, most often "no leader" while etcd elects one, resumes
		// from the revision it reached: relisting there made every hub
		// read every key each time the etcd leader died (6 to 8 s under
		// the soak's load).
		return fmt.Errorf("watch cancelled by server: %v", wr.Err())
	}
	if err := wr.Err(); err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	return nil
}

func (c *Cache) apply(wr clientv3.WatchResponse) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if wr.IsProgressNotify() {
		// A progress notification promises every event up to its revision
		// has been sent.
		c.advanceLocked(wr.Header.Revision)
		return
	}
	last := c.rev
	if !c.isReady() { // resuming from a snapshot
		c.warm.Replayed += len(wr.Events)
	}
	for _, ev := range wr.Events {
		k := string(ev.Kv.Key)
		switch ev.Type {
		case mvccpb.PUT:
			// A create is a new key (the btree replaces one it holds, so a
			// create replayed over a snapshot's copy stays right): one map
			// lookup fewer for every key's first write. An update keeps
			// the key string the map already holds: a fresh copy per write
			// would leave every rewritten key held twice (the map's key
			// and the item's), one more object for every collection to mark.
			if ev.IsCreate() {
				c.keys.ReplaceOrInsert(k)
			} else if old, ok := c.items[k]; ok {
				k = old.Key
			} else {
				c.keys.ReplaceOrInsert(k)
			}
			c.items[k] = Item{Key: k, Value: ev.Kv.Value, ModRev: ev.Kv.ModRevision, CreateRev: ev.Kv.CreateRevision}
			c.publishLocked(Event{Type: EventPut, Key: k, Value: ev.Kv.Value, ModRev: ev.Kv.ModRevision,
				CreateRev: ev.Kv.CreateRevision, Fresh: ev.IsCreate()})
		case mvccpb.DELETE:
			old, ok := c.items[k]
			if ok {
				c.keys.Delete(k)
			}
			delete(c.items, k)
			c.publishLocked(Event{Type: EventDelete, Key: k, ModRev: ev.Kv.ModRevision, CreateRev: old.CreateRev})
		}
		last = max(last, ev.Kv.ModRevision)
	}
	// Only the events' own revisions are trusted here: a catching-up
	// watcher's header may run ahead of the events sent so far.
	c.advanceLocked(last)
}

func (c *Cache) advanceLocked(rev int64) {
	if rev <= c.rev {
		return
	}
	c.rev = rev
	close(c.revCond)
	c.revCond = make(chan struct{})
}

// Ready is closed once the first list has been applied, or, when the
// cache started from its snapshot file, once the watch from the
// snapshot's revision has caught up with etcd.
func (c *Cache) Ready() <-chan struct{} { return c.ready }

// Rev is the revision up to which the cache has applied every change.
func (c *Cache) Rev() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rev
}

// Relists counts lists after the first one (compactions and lost watches).
func (c *Cache) Relists() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.relists
}

// Snapshot returns a copy of the cached items and the revision they reflect.
func (c *Cache) Snapshot() (map[string]Item, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.items), c.rev
}

// newKeyIndex is an empty ordered set of keys.
func newKeyIndex() *btree.BTreeG[string] {
	return btree.NewG(32, func(a, b string) bool { return a < b })
}

// Descend calls fn with the cached items whose keys start with prefix and
// sort before below (no bound when below is ""), highest key first, until
// fn returns false or max items were passed. It returns the revision the
// items reflect. fn runs under the cache's lock: it must be quick and must
// not call the cache. Paging callers take a bounded batch per call and
// decode outside it, so a long listing never holds up the watch.
func (c *Cache) Descend(prefix, below string, max int, fn func(Item) bool) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	visit := func(k string) bool {
		if !strings.HasPrefix(k, prefix) || n >= max {
			return false
		}
		n++
		return fn(c.items[k])
	}
	bound := below
	if bound == "" {
		bound = clientv3.GetPrefixRangeEnd(prefix) // the first key after every key under prefix
	}
	strictlyBelow := func(k string) bool {
		if k >= bound && bound != "\x00" { // "\x00": the prefix has no end
			return true
		}
		return visit(k)
	}
	if bound == "\x00" {
		c.keys.Descend(strictlyBelow)
	} else {
		c.keys.DescendLessOrEqual(bound, strictlyBelow)
	}
	return c.rev
}

// HasPrefix reports whether any cached key starts with prefix.
func (c *Cache) HasPrefix(prefix string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	found := false
	c.keys.AscendGreaterOrEqual(prefix, func(k string) bool {
		found = strings.HasPrefix(k, prefix)
		return false
	})
	return found
}

// Get returns one cached item.
func (c *Cache) Get(key string) (Item, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	it, ok := c.items[key]
	return it, ok
}

// WaitForRevision blocks until the cache reflects every change up to rev
// (for example the revision a Commit returned), or ctx ends. While waiting it
// asks etcd for progress notifications, so a rev produced by a write outside
// the prefix is reached too.
func (c *Cache) WaitForRevision(ctx context.Context, rev int64) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	asked := false
	for {
		c.mu.Lock()
		cur, wait := c.rev, c.revCond
		c.mu.Unlock()
		if cur >= rev {
			return nil
		}
		if !asked {
			_ = c.client.RequestProgress(watchCtx(ctx))
			asked = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("store: cache of %s at rev %d, waiting for %d: %w", c.prefix, cur, rev, ctx.Err())
		case <-wait:
		case <-tick.C:
			asked = false
		}
	}
}

// Events subscribes to changes under the prefix. The channel is closed when
// the active (or, if none is active, the next) Run returns. Delivery is coalesced per key: the watcher never blocks on a
// slow reader; instead, while a reader lags, later changes to a key replace
// its undelivered event, so the reader may skip intermediate values but
// always ends with each key's latest state, and one key's events arrive in
// revision order. To pair a subscription with a consistent starting state,
// call Events first, then Snapshot: every change after the snapshot's
// revision will arrive on the channel.
func (c *Cache) Events() <-chan Event {
	ch, _ := c.Subscribe()
	return ch
}

// Subscribe is Events with a cancel func that ends the subscription early
// and closes the channel.
func (c *Cache) Subscribe() (<-chan Event, func()) {
	s := newSubscriber()
	c.mu.Lock()
	c.subs[s] = struct{}{}
	c.mu.Unlock()
	cancel := func() {
		c.mu.Lock()
		delete(c.subs, s)
		c.mu.Unlock()
		s.close()
	}
	return s.out, cancel
}

func (c *Cache) publishLocked(ev Event) {
	c.journalLocked(ev.Key)
	for s := range c.subs {
		s.push(ev)
	}
	for ch := range c.notify {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Notify is a subscription for a reader that needs to know that something
// changed, not what (the scheduling loop, which reads the changes with
// Delta): its channel holds one pending signal at most, and nothing per
// key. A Subscribe reader that only looks now and then holds an event for
// every key changed since, deleted ones included: at 2,000 workloads/s
// with retention on, the loop's subscription grew by hundreds of MB over
// ten minutes. The channel is closed when the active (or, if none is
// active, the next) Run returns, or by cancel.
func (c *Cache) Notify() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	c.mu.Lock()
	c.notify[ch] = struct{}{}
	c.mu.Unlock()
	cancel := func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.notify[ch]; ok {
			close(ch)
			delete(c.notify, ch)
		}
	}
	return ch, cancel
}

// subscriber holds undelivered events keyed by key, in first-arrival order,
// and a goroutine that hands them to the reader.
type subscriber struct {
	out    chan Event
	wake   chan struct{}
	quit   chan struct{}
	once   sync.Once
	mu     sync.Mutex
	seq    uint64
	queue  []queuedKey          // in order of each key's latest change; stale entries skipped
	latest map[string]pendingEv // key -> its undelivered latest event
}

type queuedKey struct {
	key string
	seq uint64
}

type pendingEv struct {
	ev  Event
	seq uint64
}

func newSubscriber() *subscriber {
	s := &subscriber{out: make(chan Event), wake: make(chan struct{}, 1), quit: make(chan struct{}), latest: map[string]pendingEv{}}
	go s.loop()
	return s
}

// push queues ev. A key with an undelivered event keeps only the newest
// one, which moves to the back of the queue: events leave in the order of
// their revisions (a reader that resumes from the last revision it saw
// misses nothing), and the queue stays within twice the keys pending.
func (s *subscriber) push(ev Event) {
	s.mu.Lock()
	s.seq++
	if p, ok := s.latest[ev.Key]; ok {
		// The undelivered event is folded into this one, and with it the
		// creation it may stand for.
		ev.Fresh = ev.Fresh || p.ev.Fresh
	}
	s.latest[ev.Key] = pendingEv{ev: ev, seq: s.seq}
	s.queue = append(s.queue, queuedKey{key: ev.Key, seq: s.seq})
	if len(s.queue) > 2*len(s.latest)+16 {
		live := s.queue[:0]
		for _, q := range s.queue {
			if p, ok := s.latest[q.key]; ok && p.seq == q.seq {
				live = append(live, q)
			}
		}
		clear(s.queue[len(live):])
		s.queue = live
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// pop takes the next current event, skipping entries superseded by a
// later change of their key.
func (s *subscriber) pop() (Event, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) > 0 {
		q := s.queue[0]
		s.queue = s.queue[1:]
		if p, ok := s.latest[q.key]; ok && p.seq == q.seq {
			delete(s.latest, q.key)
			return p.ev, true
		}
	}
	return Event{}, false
}

func (s *subscriber) close() { s.once.Do(func() { close(s.quit) }) }

func (s *subscriber) loop() {
	defer close(s.out)
	for {
		ev, ok := s.pop()
		if !ok {
			select {
			case <-s.wake:
				continue
			case <-s.quit:
				return
			}
		}
		select {
		case s.out <- ev:
		case <-s.quit:
			return
		}
	}
}
