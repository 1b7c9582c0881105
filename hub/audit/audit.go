package audit

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// legacyPrefix is where hubs before the paged log (page.go) kept one key
// per event; a recorder moves what it finds there into pages when it
// starts. Both prefixes are outside the hub's watched state (/meridian/...),
// so auditing never feeds the scheduling loop's cache.
const legacyPrefix = "/meridian-audit/events/"

// Defaults for Config's zero fields.
const (
	DefaultMaxAge    = 30 * 24 * time.Hour
	DefaultMaxEvents = 100_000
	DefaultQueue     = 10_000
	DefaultLinger    = 100 * time.Millisecond
	batchSize        = 1024
	pruneEvery       = time.Minute
)

// Config says where events go.
type Config struct {
	// JSONLines, when set, receives one JSON object per event per line.
	JSONLines io.Writer
	// Etcd, when set, stores events for ListAuditEvents.
	Etcd *clientv3.Client
	// MaxAge and MaxEvents bound the etcd log; 0 means the defaults.
	MaxAge    time.Duration
	MaxEvents int
	// Queue bounds events waiting for etcd; 0 means DefaultQueue.
	Queue int
	// Linger is how long the etcd writer waits for more events after
	// the first of a batch; 0 means DefaultLinger, negative not at all.
	// Every write is an etcd transaction (a raft round and a WAL fsync
	// shared with the hub's own writes), so under load one batch per
	// Linger instead of one per handful of requests keeps the audit log
	// from taking a large share of etcd's transactions (at 2,000
	// submits/s it had about 40%). The log is read by people, for whom
	// a tenth of a second does not matter.
	Linger time.Duration
	// Logger receives write failures; nil drops them.
	Logger *slog.Logger
	// Clock stamps events without a time; nil means time.Now.
	Clock func() time.Time
}

// Recorder records events. It is safe for concurrent use.
type Recorder struct {
	cfg     Config
	log     *slog.Logger
	now     func() time.Time
	jsonMu  sync.Mutex
	json    *bufio.Writer
	queue   chan *meridianv1.AuditEvent
	dropped atomic.Int64
	written atomic.Int64
	done    chan struct{}
	stop    context.CancelFunc
}

// New starts a Recorder; Close flushes and stops it.
func New(cfg Config) *Recorder {
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = DefaultMaxAge
	}
	if cfg.MaxEvents <= 0 {
		cfg.MaxEvents = DefaultMaxEvents
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.Linger == 0 {
		cfg.Linger = DefaultLinger
	}
	r := &Recorder{cfg: cfg, log: cfg.Logger, now: cfg.Clock, done: make(chan struct{})}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.now == nil {
		r.now = time.Now
	}
	if cfg.JSONLines != nil {
		r.json = bufio.NewWriter(cfg.JSONLines)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	if cfg.Etcd != nil {
		r.queue = make(chan *meridianv1.AuditEvent, cfg.Queue)
		go r.writeLoop(ctx)
	} else {
		close(r.done)
	}
	return r
}

// OpenFile opens path for appending audit lines; "-" is standard output.
func OpenFile(path string) (io.WriteCloser, error) {
	if path == "-" {
		return nopCloser{os.Stdout}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	return f, nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// Record stamps e with an id and a time (if unset) and hands it to the
// sinks. It never blocks on etcd.
func (r *Recorder) Record(e *meridianv1.AuditEvent) {
	if r == nil || e == nil {
		return
	}
	now := r.now()
	if e.Time == nil {
		e.Time = timestamppb.New(now)
	}
	if !validID(e.Id) {
		e.Id = NewID(e.Time.AsTime())
	}
	if r.json != nil {
		b, err := protojson.Marshal(e)
		if err == nil {
			r.jsonMu.Lock()
			r.json.Write(b)
			r.json.WriteByte('\n')
			err = r.json.Flush()
			r.jsonMu.Unlock()
		}
		if err != nil {
			r.log.Error("audit: writing the JSON-lines log failed", "err", err)
		}
	}
	if r.queue != nil {
		select {
		case r.queue <- e:
		default:
			if n := r.dropped.Add(1); n == 1 || n%1000 == 0 {
				r.log.Error("audit: the etcd log is behind; events dropped from it (the JSON-lines log still has them)", "dropped", n)
			}
		}
	}
}

// Dropped says how many events the etcd log lost to a full queue.
func (r *Recorder) Dropped() int64 { return r.dropped.Load() }

// Close writes what is queued (for up to 5 s) and stops.
func (r *Recorder) Close() error {
	if r == nil {
		return nil
	}
	if r.queue != nil {
		close(r.queue)
		select {
		case <-r.done:
		case <-time.After(5 * time.Second):
		}
	}
	r.stop()
	return nil
}

// NewID returns a unique id that sorts by time: 20 decimal digits of Unix
// nanoseconds, a dash and 8 random hex digits.
func NewID(t time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%020d-%s", t.UnixNano(), hex.EncodeToString(b[:]))
}

func (r *Recorder) writeLoop(ctx context.Context) {
	defer close(r.done)
	lastPrune := time.Time{}
	var linger *time.Timer
	if r.cfg.Linger > 0 {
		linger = time.NewTimer(r.cfg.Linger)
		linger.Stop()
		defer linger.Stop()
	}
	if err := r.migrate(ctx); err != nil {
		r.log.Error("audit: moving events stored one key each into pages failed; List does not show them until a restart moves them", "err", err)
	}
	for open := true; open; {
		e, ok := <-r.queue
		if !ok {
			return
		}
		var batch []*meridianv1.AuditEvent
		batch, open = r.fill(append(make([]*meridianv1.AuditEvent, 0, 16), e), linger)
		if err := r.put(ctx, batch); err != nil {
			r.log.Error("audit: writing to etcd failed", "events", len(batch), "err", err)
		}
		if now := r.now(); now.Sub(lastPrune) >= pruneEvery {
			lastPrune = now
			if err := r.prune(ctx, now); err != nil {
				r.log.Warn("audit: pruning old events failed", "err", err)
			}
		}
	}
}

// fill adds queued events to batch until it holds batchSize, the queue is
// closed, or linger (nil: nothing more than what is queued now) fires. It
// reports whether the queue is still open.
func (r *Recorder) fill(batch []*meridianv1.AuditEvent, linger *time.Timer) ([]*meridianv1.AuditEvent, bool) {
	var fired <-chan time.Time
	if linger != nil {
		linger.Reset(r.cfg.Linger)
		defer linger.Stop()
		fired = linger.C
	}
	for len(batch) < batchSize {
		select {
		case e, ok := <-r.queue:
			if !ok {
				return batch, false
			}
			batch = append(batch, e)
			continue
		default:
		}
		if fired == nil {
			return batch, true
		}
		select {
		case e, ok := <-r.queue:
			if !ok {
				return batch, false
			}
			batch = append(batch, e)
		case <-fired:
			return batch, true
		}
	}
	return batch, true
}

// put writes a batch as pages, in one transaction.
func (r *Recorder) put(ctx context.Context, batch []*meridianv1.AuditEvent) error {
	err := r.putPages(ctx, batch)
	if err == nil {
		r.written.Add(int64(len(batch)))
	}
	return err
}

// putPages writes events as pages, and then ops, in one transaction.
func (r *Recorder) putPages(ctx context.Context, events []*meridianv1.AuditEvent, then ...clientv3.Op) error {
	pages, err := paginate(events)
	if err != nil {
		return err
	}
	ops := make([]clientv3.Op, 0, len(pages)+len(then))
	for i := range pages {
		ops = append(ops, clientv3.OpPut(pages[i].key(), string(pages[i].value)))
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = r.cfg.Etcd.Txn(ctx).Then(append(ops, then...)...).Commit()
	return err
}

// migrate moves events stored one key each (legacyPrefix) into pages. Each
// transaction writes a chunk's pages and deletes its keys together, so a
// crash midway neither loses nor repeats an event; two hubs doing it at
// once write the same pages.
func (r *Recorder) migrate(ctx context.Context) error {
	moved := 0
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := r.cfg.Etcd.Get(cctx, legacyPrefix, clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend), clientv3.WithLimit(512))
		cancel()
		if err != nil || len(resp.Kvs) == 0 {
			if moved > 0 && err == nil {
				r.log.Info("audit: moved events stored one key each into pages", "events", moved)
			}
			return err
		}
		var events []*meridianv1.AuditEvent
		for _, kv := range resp.Kvs {
			e := &meridianv1.AuditEvent{}
			if err := proto.Unmarshal(kv.Value, e); err != nil || !validID(e.GetId()) {
				r.log.Warn("audit: dropping a stored event that does not decode", "key", string(kv.Key), "err", err)
				continue
			}
			events = append(events, e)
		}
		last := string(resp.Kvs[len(resp.Kvs)-1].Key)
		if err := r.putPages(ctx, events, clientv3.OpDelete(string(resp.Kvs[0].Key), clientv3.WithRange(last+"\x00"))); err != nil {
			return err
		}
		moved += len(events)
	}
}

// prune deletes the pages whose newest event is older than MaxAge, then
// the oldest pages beyond MaxEvents events (a page is kept or deleted
// whole, so the log may hold a little less than MaxEvents). Page keys sort
// by time, so each is one range delete.
func (r *Recorder) prune(ctx context.Context, now time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cutoff := PagePrefix + idFloor(now.Add(-r.cfg.MaxAge).UnixNano())
	if _, err := r.cfg.Etcd.Delete(ctx, PagePrefix, clientv3.WithRange(cutoff)); err != nil {
		return err
	}
	kept, hi := 0, clientv3.GetPrefixRangeEnd(PagePrefix)
	for {
		resp, err := r.cfg.Etcd.Get(ctx, PagePrefix, clientv3.WithRange(hi), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(1000))
		if err != nil {
			return err
		}
		for _, kv := range resp.Kvs {
			hi = string(kv.Key)
			_, n, err := pageKey(hi)
			if err != nil {
				continue // not a page this package wrote
			}
			if kept+n > r.cfg.MaxEvents {
				// This page and every older one go.
				_, err := r.cfg.Etcd.Delete(ctx, PagePrefix, clientv3.WithRange(hi+"\x00"))
				return err
			}
			kept += n
		}
		if !resp.More {
			return nil
		}
	}
}

// Filter selects events for List.
type Filter struct {
	User, Verb, Target string
	Since, Until       time.Time
	Result             meridianv1.AuditResult
}

func (f Filter) match(e *meridianv1.AuditEvent) bool {
	switch {
	case f.User != "" && e.GetPrincipal().GetUser() != f.User,
		f.Verb != "" && e.GetVerb() != f.Verb,
		f.Target != "" && !strings.HasPrefix(e.GetTarget(), f.Target),
		f.Result != meridianv1.AuditResult_AUDIT_RESULT_UNSPECIFIED && e.GetResult() != f.Result:
		return false
	}
	return true
}

// ErrBadPageToken is List's error for a token it did not issue.
var ErrBadPageToken = errors.New("audit: page token is not one this server issued")

// maxScan bounds the events one List call reads past its filters.
const maxScan = 20_000

// List reads events from etcd, newest first, at most limit, starting below
// the page token (an event id) when set. It returns the next page token,
// empty on the last page.
//
// Pages (page.go) are read newest key first. A page's events are all at or
// below its key's event id, and every page not yet read has a lower key,
// so after each page the events held at or above its key are final and
// are returned in order; the rest wait for the next page.
func List(ctx context.Context, cli *clientv3.Client, f Filter, limit int, token string) ([]*meridianv1.AuditEvent, string, error) {
	if limit <= 0 {
		limit = 100
	}
	lo, hi := "", "" // the ids wanted: lo <= id < hi ("" hi: no bound)
	if !f.Since.IsZero() {
		lo = idFloor(f.Since.UnixNano())
	}
	if !f.Until.IsZero() {
		hi = idFloor(f.Until.UnixNano())
	}
	if token != "" {
		if !validID(token) {
			return nil, "", ErrBadPageToken
		}
		if hi == "" || token < hi {
			hi = token
		}
	}
	keyLo, keyHi := PagePrefix+lo, clientv3.GetPrefixRangeEnd(PagePrefix)
	if hi != "" {
		// A page holding an event below hi has its newest within pageSpan of it.
		keyHi = PagePrefix + idFloor(idNanos(hi)+int64(pageSpan)+1)
	}
	var out, held []*meridianv1.AuditEvent
	// release moves the held events at or above bound to out, newest
	// first, and reports the last one's id when out is full.
	release := func(bound string) (string, bool) {
		slices.SortFunc(held, func(a, b *meridianv1.AuditEvent) int { return strings.Compare(b.GetId(), a.GetId()) })
		i := 0
		for ; i < len(held) && held[i].GetId() >= bound; i++ {
			out = append(out, held[i])
			if len(out) == limit {
				return held[i].GetId(), true
			}
		}
		held = held[i:]
		return "", false
	}
	scanned := 0
	for keyHi > keyLo {
		resp, err := cli.Get(ctx, keyLo, clientv3.WithRange(keyHi), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(16))
		if err != nil {
			return nil, "", err
		}
		for _, kv := range resp.Kvs {
			keyHi = string(kv.Key)
			newest, _, err := pageKey(keyHi)
			if err != nil {
				continue // not a page this package wrote
			}
			events, _ := decodePage(kv.Value) // what decodes of a damaged page
			scanned += len(events)
			for _, e := range events {
				if id := e.GetId(); id >= lo && (hi == "" || id < hi) && f.match(e) {
					held = append(held, e)
				}
			}
			if next, full := release(newest); full {
				return out, next, nil
			}
			if scanned >= maxScan && (hi == "" || newest < hi) {
				// Read enough for one call: everything at or above newest is
				// in out, and the next call goes on below it.
				return out, newest, nil
			}
		}
		if !resp.More {
			break
		}
	}
	if next, full := release(""); full {
		return out, next, nil
	}
	return out, "", nil
}

func validID(id string) bool {
	ns, rnd, ok := strings.Cut(id, "-")
	if !ok || len(ns) != 20 || len(rnd) != 8 {
		return false
	}
	if _, err := strconv.ParseUint(ns, 10, 64); err != nil {
		return false
	}
	_, err := hex.DecodeString(rnd)
	return err == nil
}
