package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meridian-gpu/meridian/hub/api"
	"github.com/meridian-gpu/meridian/hub/leader"
	"github.com/meridian-gpu/meridian/hub/records"
	"github.com/meridian-gpu/meridian/hub/store"
	"github.com/meridian-gpu/meridian/internal/ctxtime"
)

// Runner defaults for Config's zero fields.
const (
	// DefaultInterval is the gap between two passes. Retention works in
	// days and thousands, so a pass every few minutes keeps well within
	// the policy while listing the workloads rarely.
	DefaultInterval = 5 * time.Minute
	// DefaultBatchSize is how many workloads one transaction deletes.
	DefaultBatchSize = 64
	// DefaultMaxPerPass bounds the deletes of one pass; the rest wait for
	// the next, so a hub that just turned retention on catches up gently.
	DefaultMaxPerPass = 10_000
	// DefaultPageSize is how many workload keys one list request reads.
	DefaultPageSize = 500
	// DefaultCatchUpPause is the gap before the next pass when a pass
	// left deletes for later (it reached MaxPerPass).
	DefaultCatchUpPause = time.Second
	// DefaultFirstPass is how soon after a replica starts, or after a
	// follower becomes leader, the first pass comes.
	DefaultFirstPass = 30 * time.Second
	// DefaultDuty is the share of a pass's time spent committing deletes.
	DefaultDuty = 0.5
)

// maxAttempts bounds how often one batch is retried after conflicts.
const maxAttempts = 3

// commitTimeout bounds each etcd call of a pass.
const commitTimeout = 10 * time.Second

// FenceSource says whether this replica leads, and the fence of its term.
// *leader.Elector implements it. Fence must not block; belief is not
// proof, which is why every delete is also fenced in etcd.
type FenceSource interface {
	Fence() (leader.Fence, bool)
}

// Config tunes a Runner. Zero fields other than Policy take the defaults.
type Config struct {
	// Policy says what to delete; its zero value deletes nothing.
	Policy Policy
	// Interval is the gap between passes (DefaultInterval).
	Interval time.Duration
	// BatchSize is how many workloads one transaction deletes
	// (DefaultBatchSize); it is lowered to half the store's MaxTxnOps,
	// since each workload may take two ops.
	BatchSize int
	// MaxPerPass bounds the deletes of one pass (DefaultMaxPerPass).
	MaxPerPass int
	// PageSize is how many keys one list request reads (DefaultPageSize).
	PageSize int
	// CatchUpPause is the gap before the next pass when a pass reached
	// MaxPerPass (DefaultCatchUpPause): a backlog is worked off in
	// MaxPerPass steps with this pause between them, not one step per
	// Interval, which capped retention at MaxPerPass per Interval (33
	// workloads/s with the defaults) below what a busy hub finishes.
	CatchUpPause time.Duration
	// FirstPass is how soon after the start, or after this replica
	// becomes leader, the first pass comes (DefaultFirstPass). Waiting a
	// whole Interval there meant that hubs restarted more often than
	// that never ran retention at all (the chaos soak: 233,000 keys
	// after 30 minutes, and each restarted hub took longer to list them).
	FirstPass time.Duration
	// Duty is the most of a pass's time that its delete transactions take
	// (DefaultDuty; 1 deletes back to back): after each batch the pass
	// waits long enough that the batch's commit was at most this share of
	// the time since it began. At 2,000 workloads/s a pass has tens of
	// thousands to delete, and back to back they held etcd and the hub's
	// watchers for seconds while live submits and dispatches waited
	// behind them; paced, live writes go between the batches. At one half
	// a pass still deletes far faster than a busy hub finishes work.
	Duty float64
}

// Validate returns an error naming the field for negative values.
func (c Config) Validate() error {
	if err := c.Policy.Validate(); err != nil {
		return err
	}
	switch {
	case c.Interval < 0:
		return fmt.Errorf("retention: Config.Interval %s is negative", c.Interval)
	case c.BatchSize < 0:
		return fmt.Errorf("retention: Config.BatchSize %d is negative", c.BatchSize)
	case c.MaxPerPass < 0:
		return fmt.Errorf("retention: Config.MaxPerPass %d is negative", c.MaxPerPass)
	case c.PageSize < 0:
		return fmt.Errorf("retention: Config.PageSize %d is negative", c.PageSize)
	case c.CatchUpPause < 0:
		return fmt.Errorf("retention: Config.CatchUpPause %s is negative", c.CatchUpPause)
	case c.FirstPass < 0:
		return fmt.Errorf("retention: Config.FirstPass %s is negative", c.FirstPass)
	case c.Duty < 0 || c.Duty > 1 || c.Duty != c.Duty:
		return fmt.Errorf("retention: Config.Duty %v is not between 0 and 1", c.Duty)
	}
	return nil
}

// Deps are a Runner's collaborators.
type Deps struct {
	// Store reads and deletes in etcd. Required.
	Store *store.Store
	// Leader says whether this replica leads; pass the hub's
	// *leader.Elector. Required.
	Leader FenceSource
	// Logger; nil drops logs.
	Logger *slog.Logger
	// Clock; nil means time.Now.
	Clock func() time.Time
	// Registerer receives the metrics; nil means a private registry.
	Registerer prometheus.Registerer
	// Config tunes the runner.
	Config Config
	// Cache, when set, is where a pass lists the stored workloads: the
	// hub's watch cache, in memory, instead of a read of every workload
	// from etcd each pass. A stale entry costs nothing but a skipped
	// delete, since every delete is guarded by the listed mod revision.
	Cache Lister
	// Index, when set and fed (Index.Synced), is where a pass finds the
	// finished workloads, ordered by end time, instead of listing every
	// stored one: pass the one the dispatch loop's mirror feeds. Until
	// it is synced, passes list.
	Index *Index
}

// Lister reads stored records from memory; *store.Cache implements it.
// Descend must not block for long: fn runs under the cache's lock.
type Lister interface {
	Ready() <-chan struct{}
	Descend(prefix, below string, max int, fn func(store.Item) bool) int64
}

// Runner deletes finished workloads on the leader. Build it with New and
// drive it with Run (or Pass, one pass at a time).
type Runner struct {
	st     *store.Store
	cache  Lister
	index  *Index
	leader FenceSource
	log    *slog.Logger
	clock  func() time.Time
	cfg    Config
	m      *metrics

	// afterSelect, when set, runs between the list and the first delete
	// (tests: change state in that window).
	afterSelect func()
	// sleep waits between batches (Config.Duty); false when ctx ended.
	// Tests replace it to see the pauses.
	sleep func(ctx context.Context, d time.Duration) bool

	// lastListed is how many finished workloads the last pass listed: the
	// next pass sizes its list from it instead of growing it by copies
	// (at tens of thousands of stored workloads and a pass a second while
	// catching up, the copies were most of retention's CPU).
	lastListed atomic.Int64

	// carry is what the last pass chose but left for the next because it
	// reached MaxPerPass. The catch-up pass deletes it without listing
	// and summarizing every stored workload again (at 2,000 workloads/s a
	// backlog takes a pass a second, each of which listed 140,000
	// records). Deletes compare each key's mod revision, so a carried
	// workload that changed since is kept, as in any pass; what the
	// policy chose stays chosen as time passes (a workload only gets
	// older, and newer ones only push it further over a queue's cap).
	carryMu   sync.Mutex
	carry     []*entry
	carriedAt time.Time
}

// New checks deps and returns a Runner.
func New(d Deps) (*Runner, error) {
	switch {
	case d.Store == nil:
		return nil, errors.New("retention: Deps.Store is required")
	case d.Leader == nil:
		return nil, errors.New("retention: Deps.Leader is required")
	}
	if err := d.Config.Validate(); err != nil {
		return nil, err
	}
	c := d.Config
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	c.BatchSize = max(1, min(c.BatchSize, d.Store.MaxTxnOps()/2))
	if c.MaxPerPass == 0 {
		c.MaxPerPass = DefaultMaxPerPass
	}
	if c.PageSize == 0 {
		c.PageSize = DefaultPageSize
	}
	if c.FirstPass == 0 {
		c.FirstPass = DefaultFirstPass
	}
	if c.CatchUpPause == 0 {
		c.CatchUpPause = DefaultCatchUpPause
	}
	if c.Duty == 0 {
		c.Duty = DefaultDuty
	}
	r := &Runner{st: d.Store, cache: d.Cache, index: d.Index, leader: d.Leader, log: d.Logger, clock: d.Clock, cfg: c, sleep: ctxtime.Sleep}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.log = r.log.With("component", "retention")
	if r.clock == nil {
		r.clock = time.Now
	}
	reg := d.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	r.m = m
	return r, nil
}

// Config is the runner's configuration with defaults applied.
func (r *Runner) Config() Config { return r.cfg }

// Run makes a pass every Interval while this replica leads, until ctx
// ends (it then returns nil). With a disabled policy it returns at once.
// A failed pass is logged and retried at the next tick.
func (r *Runner) Run(ctx context.Context) error {
	if !r.cfg.Policy.Enabled() {
		r.log.Info("retention disabled: finished workloads are kept forever")
		return nil
	}
	r.log.Info("retention on", "ttl", r.cfg.Policy.TTL.String(), "max_per_queue", r.cfg.Policy.MaxPerQueue, "interval", r.cfg.Interval.String())
	// A follower looks every FirstPass whether it leads, so that a new
	// leader's first pass comes soon; a leader passes every Interval.
	soon := min(r.cfg.FirstPass, r.cfg.Interval)
	t := time.NewTimer(soon)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		wait := soon
		if fence, ok := r.leader.Fence(); ok {
			wait = r.cfg.Interval
			// Pass logs its own outcome. One that stopped at MaxPerPass
			// (and did not fail) is followed soon by the next, and so is
			// one that worked off a carry: while it did, more expired.
			if res, err := r.Pass(ctx, fence); err == nil && (res.Deferred > 0 || res.Carried > 0) {
				wait = min(r.cfg.CatchUpPause, r.cfg.Interval)
			}
		}
		t.Reset(wait)
	}
}

// Result counts what one pass saw and did.
type Result struct {
	// Scanned is how many workload records were listed.
	Scanned int
	// Finished is how many of them are in a terminal phase.
	Finished int
	// Undecodable records are skipped (and logged).
	Undecodable int
	// ExpiredTTL and OverCap are how many the policy chose, by reason.
	ExpiredTTL, OverCap int
	// Deleted is how many workloads were deleted, and IdempotencyKeys how
	// many idempotency keys went with them.
	Deleted, IdempotencyKeys int
	// Changed is how many chosen workloads changed or vanished before
	// their delete and were kept.
	Changed int
	// Deferred is how many chosen workloads were left for the next pass
	// (MaxPerPass, repeated conflicts, or a pass cut short by an error).
	// A pass that chose from the Index counts at most MaxPerPass+1 of
	// each queue's, so its Deferred may undercount; it is above 0 exactly
	// when work was left.
	Deferred int
	// Carried is how many of this pass's workloads an earlier pass chose
	// and left (MaxPerPass): such a pass lists nothing, and Scanned,
	// Finished, ExpiredTTL and OverCap stay 0.
	Carried int
	// Indexed is true when the pass chose from the Index: it listed
	// nothing (Scanned is 0) and Finished is the index's size.
	Indexed bool
}

// entry is one finished workload as listed.
type entry struct {
	Finished
	key     string
	modRev  int64
	idemKey string // "" when the workload has no idempotency key
	reason  Reason
}

// Pass lists the workloads, selects what the policy deletes at the
// runner's clock, and deletes it in batches, each commit fenced by fence.
// It returns what it did even on error. A lost fence stops the pass with
// an error matching leader.IsNotLeader; nothing is written after that.
func (r *Runner) Pass(ctx context.Context, fence leader.Fence) (Result, error) {
	start := time.Now()
	res, err := r.pass(ctx, fence)
	outcome := "ok"
	switch {
	case leader.IsNotLeader(err):
		outcome = "not_leader"
	case err != nil:
		outcome = "error"
	}
	r.m.passes.WithLabelValues(outcome).Inc()
	attrs := []any{"scanned", res.Scanned, "finished", res.Finished, "expired_ttl", res.ExpiredTTL, "over_cap", res.OverCap,
		"deleted", res.Deleted, "idempotency_keys", res.IdempotencyKeys, "changed", res.Changed, "deferred", res.Deferred,
		"carried", res.Carried, "indexed", res.Indexed, "took", time.Since(start).Round(time.Millisecond).String()}
	if res.Undecodable > 0 {
		attrs = append(attrs, "undecodable", res.Undecodable)
	}
	if err != nil {
		r.log.Warn("retention pass stopped", append(attrs, "err", err)...)
		return res, err
	}
	r.log.Info("retention pass", attrs...)
	return res, nil
}

func (r *Runner) pass(ctx context.Context, fence leader.Fence) (Result, error) {
	var res Result
	if err := fence.Validate(); err != nil {
		return res, fmt.Errorf("retention: %w", err)
	}
	if !r.cfg.Policy.Enabled() {
		return res, nil
	}
	chosen := r.takeCarry()
	res.Carried = len(chosen)
	if chosen == nil {
		var err error
		if chosen, err = r.choose(ctx, &res); err != nil {
			return res, err
		}
	}
	switch {
	case res.Carried > 0:
		r.m.sources.WithLabelValues(sourceCarry).Inc()
	case res.Indexed:
		r.m.sources.WithLabelValues(sourceIndex).Inc()
	default:
		r.m.sources.WithLabelValues(sourceList).Inc()
		r.m.listed.Add(float64(res.Scanned))
	}
	if len(chosen) > r.cfg.MaxPerPass {
		res.Deferred += len(chosen) - r.cfg.MaxPerPass
		if !res.Indexed {
			// The next pass reads an index again at no cost, but a
			// list again at the cost of every stored workload.
			r.keepCarry(chosen[r.cfg.MaxPerPass:])
		}
		chosen = chosen[:r.cfg.MaxPerPass]
	}
	var pause time.Duration // before the next batch (Config.Duty)
	for i := 0; i < len(chosen); i += r.cfg.BatchSize {
		if i > 0 && !r.sleep(ctx, pause) {
			res.Deferred += len(chosen) - i
			return res, ctx.Err()
		}
		batch := chosen[i:min(i+r.cfg.BatchSize, len(chosen))]
		began := time.Now()
		if err := r.deleteBatch(ctx, fence, batch, &res); err != nil {
			res.Deferred += len(chosen) - i - len(batch)
			return res, err
		}
		pause = pauseAfter(time.Since(began), r.cfg.Duty)
	}
	return res, nil
}

// choose selects what the policy deletes, from the index when it is
// synced, else from a list of every stored workload.
func (r *Runner) choose(ctx context.Context, res *Result) ([]*entry, error) {
	if r.index != nil && r.index.Synced() {
		return r.chooseIndexed(res), nil
	}
	entries, err := r.listFinished(ctx, res)
	if err != nil {
		return nil, err
	}
	r.m.finished.Set(float64(res.Finished))
	fin := make([]Finished, len(entries))
	for i := range entries {
		fin[i] = entries[i].Finished
	}
	var chosen []*entry
	for _, d := range Select(fin, r.cfg.Policy, r.clock()) {
		var e *entry
		if d.Index >= 0 && d.Index < len(entries) && entries[d.Index].ID == d.ID {
			e = &entries[d.Index]
		}
		if e == nil || !api.IsTerminal(e.Phase) {
			// Select never returns these; refuse rather than trust it.
			continue
		}
		e.reason = d.Reason
		switch d.Reason {
		case ReasonTTL:
			res.ExpiredTTL++
		case ReasonQueueCap:
			res.OverCap++
		}
		chosen = append(chosen, e)
	}
	if r.afterSelect != nil {
		r.afterSelect()
	}
	return chosen, nil
}

// chooseIndexed is choose from the index: no list, and no summary read.
func (r *Runner) chooseIndexed(res *Result) []*entry {
	entries, n := r.index.choose(r.cfg.Policy, r.clock(), r.cfg.MaxPerPass)
	res.Indexed, res.Finished = true, n
	r.m.finished.Set(float64(n))
	chosen := make([]*entry, len(entries))
	for i := range entries {
		switch entries[i].reason {
		case ReasonTTL:
			res.ExpiredTTL++
		case ReasonQueueCap:
			res.OverCap++
		}
		chosen[i] = &entries[i]
	}
	if r.afterSelect != nil {
		r.afterSelect()
	}
	return chosen
}

// takeCarry is what the last pass left for this one (and forgets it); nil
// when there is none, or when it is older than an Interval (a pass that
// comes that late is a regular one and lists afresh).
func (r *Runner) takeCarry() []*entry {
	r.carryMu.Lock()
	defer r.carryMu.Unlock()
	c := r.carry
	r.carry = nil
	if len(c) == 0 || r.clock().Sub(r.carriedAt) > r.cfg.Interval {
		return nil
	}
	return c
}

// keepCarry leaves rest, chosen but not deleted, for the next pass.
func (r *Runner) keepCarry(rest []*entry) {
	r.carryMu.Lock()
	defer r.carryMu.Unlock()
	// Copies, so the carry does not hold the whole list it came from.
	kept, ptrs := make([]entry, len(rest)), make([]*entry, len(rest))
	for i, e := range rest {
		kept[i] = *e
		ptrs[i] = &kept[i]
	}
	r.carry, r.carriedAt = ptrs, r.clock()
}

// pauseAfter is how long to wait after a batch that took took, so that it
// was at most duty of the time from its start to the next batch's.
func pauseAfter(took time.Duration, duty float64) time.Duration {
	if duty >= 1 || took <= 0 {
		return 0
	}
	return time.Duration(float64(took) * (1 - duty) / duty)
}

// listFinished pages through the workload records, from the watch cache
// when there is one and it is ready, else from etcd at one revision, and
// keeps what Select and the deletes need of each finished one. Each record
// is summarized (records.SummarizeWorkload), not decoded: a pass looks at
// every stored workload, most of them finished, and only needs a few of
// their fields.
func (r *Runner) listFinished(ctx context.Context, res *Result) ([]entry, error) {
	n := int(r.lastListed.Load())
	out := make([]entry, 0, n+n/8)
	defer func() { r.lastListed.Store(int64(len(out))) }()
	visit := func(key string, value []byte, modRev int64) {
		res.Scanned++
		s, err := records.SummarizeWorkload(value)
		if err != nil {
			res.Undecodable++
			r.log.Warn("skipping undecodable workload record", "key", key, "err", err)
			return
		}
		if !api.IsTerminal(s.Phase) {
			return
		}
		res.Finished++
		e := entry{
			Finished: Finished{ID: strings.TrimPrefix(key, store.Prefix(store.KindWorkloads)), Queue: s.Queue, Phase: s.Phase, End: s.End},
			key:      key, modRev: modRev,
		}
		if s.IdempotencyKey != "" {
			e.idemKey = api.IdempotencyKey(s.Queue, s.IdempotencyKey)
		}
		out = append(out, e)
	}
	if r.cacheReady() {
		r.listCached(visit)
		return out, nil
	}
	if err := r.listEtcd(ctx, visit); err != nil {
		return nil, err
	}
	return out, nil
}

func (r *Runner) cacheReady() bool {
	if r.cache == nil {
		return false
	}
	select {
	case <-r.cache.Ready():
		return true
	default:
		return false
	}
}

// listCached walks the cached workload records newest key first, a page
// at a time: the cache's lock is held only to copy a page's items (the
// values are shared, read-only), and summarizing happens outside it.
func (r *Runner) listCached(visit func(key string, value []byte, modRev int64)) {
	prefix := store.Prefix(store.KindWorkloads)
	page := make([]store.Item, 0, r.cfg.PageSize)
	below := ""
	for {
		page = page[:0]
		r.cache.Descend(prefix, below, r.cfg.PageSize, func(it store.Item) bool {
			page = append(page, it)
			return true
		})
		for _, it := range page {
			visit(it.Key, it.Value, it.ModRev)
		}
		if len(page) < r.cfg.PageSize {
			return
		}
		below = page[len(page)-1].Key
	}
}

// listEtcd pages through the workload keys in etcd at one revision.
func (r *Runner) listEtcd(ctx context.Context, visit func(key string, value []byte, modRev int64)) error {
	prefix := store.Prefix(store.KindWorkloads)
	end := clientv3.GetPrefixRangeEnd(prefix)
	cli := r.st.Client()
	var (
		rev   int64
		start = prefix
	)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(r.cfg.PageSize))}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		gctx, cancel := context.WithTimeout(ctx, commitTimeout)
		resp, err := cli.Get(gctx, start, opts...)
		cancel()
		if err != nil {
			return fmt.Errorf("retention: list workloads at rev %d: %w", rev, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			visit(string(kv.Key), kv.Value, kv.ModRevision)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

type idemState struct {
	value  string
	modRev int64
}

// readIdem reads the idempotency keys of batch in one transaction.
func (r *Runner) readIdem(ctx context.Context, batch []*entry) (map[string]idemState, error) {
	var ops []clientv3.Op
	var keys []string
	for _, e := range batch {
		if e.idemKey != "" {
			ops = append(ops, clientv3.OpGet(e.idemKey))
			keys = append(keys, e.idemKey)
		}
	}
	out := map[string]idemState{}
	if len(ops) == 0 {
		return out, nil
	}
	gctx, cancel := context.WithTimeout(ctx, commitTimeout)
	defer cancel()
	resp, err := r.st.Client().Txn(gctx).Then(ops...).Commit()
	if err != nil {
		return nil, fmt.Errorf("retention: read %d idempotency keys: %w", len(ops), err)
	}
	for i, rr := range resp.Responses {
		if kvs := rr.GetResponseRange().GetKvs(); len(kvs) == 1 {
			out[keys[i]] = idemState{value: string(kvs[0].Value), modRev: kvs[0].ModRevision}
		}
	}
	return out, nil
}

// deleteBatch deletes batch in one fenced transaction, each workload
// guarded by its listed mod revision and its idempotency key deleted only
// while it names that workload. On a conflict it drops the workloads that
// changed and tries the rest again, a few times at most.
func (r *Runner) deleteBatch(ctx context.Context, fence leader.Fence, batch []*entry, res *Result) error {
	pending := batch
	for attempt := 0; attempt < maxAttempts && len(pending) > 0; attempt++ {
		idem, err := r.readIdem(ctx, pending)
		if err != nil {
			res.Deferred += len(pending)
			return err
		}
		ops := make([]store.Op, 0, 2*len(pending))
		idemDeletes := 0
		for _, e := range pending {
			ops = append(ops, store.Delete(e.key, e.modRev))
			if is, ok := idem[e.idemKey]; ok && e.idemKey != "" && is.value == e.ID {
				ops = append(ops, store.Delete(e.idemKey, is.modRev))
				idemDeletes++
			}
		}
		cctx, cancel := context.WithTimeout(ctx, commitTimeout)
		_, err = r.st.Commit(cctx, &fence, ops...)
		cancel()
		if err == nil {
			res.Deleted += len(pending)
			res.IdempotencyKeys += idemDeletes
			for _, e := range pending {
				r.forget(e)
				r.m.deleted.WithLabelValues(string(e.reason)).Inc()
				r.log.Debug("deleted finished workload", "workload", e.ID, "queue", e.Queue, "reason", string(e.reason))
			}
			return nil
		}
		var ce *store.ConflictError
		if !errors.As(err, &ce) {
			res.Deferred += len(pending)
			return fmt.Errorf("retention: delete %d workloads: %w", len(pending), err)
		}
		// A workload whose key conflicted changed (or went) since the
		// list: keep it. A conflict on an idempotency key only means it
		// changed after readIdem; the retry reads it again.
		changed := map[string]bool{}
		for _, k := range ce.Keys {
			changed[k.Key] = true
		}
		var next []*entry
		for _, e := range pending {
			if changed[e.key] {
				res.Changed++
				r.m.changed.Inc()
				// Not as chosen any more: the index hears of its new
				// state from its feeder, if it is finished.
				r.forget(e)
				continue
			}
			next = append(next, e)
		}
		pending = next
	}
	res.Deferred += len(pending)
	return nil
}

// forget drops a deleted or changed workload from the index (if it still
// holds it as chosen), so the next pass does not choose it again before
// the index's feeder reads the change.
func (r *Runner) forget(e *entry) {
	if r.index != nil {
		r.index.drop(e.key, e.modRev)
	}
}
