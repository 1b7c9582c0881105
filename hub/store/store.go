package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meridian-gpu/meridian/hub/leader"
)

// DefaultMaxTxnOps matches stock etcd's --max-txn-ops. Set Options.MaxTxnOps
// to the server's limit when it is larger (the embedded server allows 10,000).
const DefaultMaxTxnOps = 128

// DefaultPageSize is List's page size when the caller passes 0 and etcd
// cannot stream the range. etcd counts the rest of the range for every page
// it serves, so small pages make a long list quadratic: the cache's first
// list of 233,000 keys took 8.3 s in pages of 1,000 and 1.8 s in pages of
// 10,000 (three members on loopback). 2,000 keeps a page of typical
// workloads to a few MB.
const DefaultPageSize = 2000

type opKind int

const (
	opPut opKind = iota + 1
	opPutIfModRev
	opDelete
	opDeleteAny
	opCheck
)

func (k opKind) String() string {
	switch k {
	case opPut:
		return "Put"
	case opPutIfModRev:
		return "PutIfModRev"
	case opDelete:
		return "Delete"
	case opDeleteAny:
		return "DeleteAny"
	case opCheck:
		return "Check"
	}
	return "Op?"
}

// Op is one operation of a Commit. Build it with Put, PutIfModRev, Delete,
// DeleteAny or Check; the zero Op is invalid.
type Op struct {
	kind   opKind
	key    string
	val    []byte
	modRev int64
}

// Put writes val at key whatever is there.
func Put(key string, val []byte) Op { return Op{kind: opPut, key: key, val: val} }

// PutIfModRev writes val at key only if the key's mod revision is modRev;
// modRev 0 means the key must not exist (create).
func PutIfModRev(key string, val []byte, modRev int64) Op {
	return Op{kind: opPutIfModRev, key: key, val: val, modRev: modRev}
}

// Delete removes key only if its mod revision is modRev (which must be > 0).
func Delete(key string, modRev int64) Op { return Op{kind: opDelete, key: key, modRev: modRev} }

// DeleteAny removes key whatever its revision; a missing key is not an error.
func DeleteAny(key string) Op { return Op{kind: opDeleteAny, key: key} }

// Check writes nothing but makes the commit conditional on key's mod revision
// being modRev (0: must not exist). Use it for keys a plan read but does not
// change.
func Check(key string, modRev int64) Op { return Op{kind: opCheck, key: key, modRev: modRev} }

// Key is the op's key.
func (o Op) Key() string { return o.key }

// PutGuard returns the mod revision a PutIfModRev op requires of its key,
// and false for every other op.
func (o Op) PutGuard() (int64, bool) {
	if o.kind != opPutIfModRev {
		return 0, false
	}
	return o.modRev, true
}

// Unguarded is o without its revision check: a PutIfModRev becomes a
// Put; any other op comes back as it is. For a writer that has checked
// the revision itself (the dispatch loop's write gate).
func (o Op) Unguarded() Op {
	if o.kind == opPutIfModRev {
		o.kind, o.modRev = opPut, 0
	}
	return o
}

// SameCheck reports whether o and p are the same Check (one key, one
// expected revision): two callers' ops that may share one transaction.
func (o Op) SameCheck(p Op) bool {
	return o.kind == opCheck && p.kind == opCheck && o.key == p.key && o.modRev == p.modRev
}

func (o Op) conditional() bool {
	return o.kind == opPutIfModRev || o.kind == opDelete || o.kind == opCheck
}

// Value is the value a put writes (nil for every other op).
func (o Op) Value() []byte { return o.val }

// CheckRev returns the mod revision a Check requires of its key, and
// false for every other op.
func (o Op) CheckRev() (int64, bool) {
	if o.kind != opCheck {
		return 0, false
	}
	return o.modRev, true
}

// Writes reports whether o writes its key (every op but a Check).
func (o Op) Writes() bool { return o.kind != opCheck }

func (o Op) validate(i int) error {
	switch {
	case o.kind == 0:
		return fmt.Errorf("store: op %d is the zero Op; build ops with Put, PutIfModRev, Delete, DeleteAny or Check", i)
	case o.key == "":
		return fmt.Errorf("store: op %d (%s) has an empty key", i, o.kind)
	case o.modRev < 0:
		return fmt.Errorf("store: op %d (%s %s) has negative modRev %d", i, o.kind, o.key, o.modRev)
	case o.kind == opDelete && o.modRev == 0:
		return fmt.Errorf("store: op %d (Delete %s) needs modRev > 0; use DeleteAny for an unconditional delete", i, o.key)
	}
	return nil
}

// Options tune a Store.
type Options struct {
	// MaxTxnOps is the most Ops one Commit may carry; it must not exceed the
	// server's --max-txn-ops. 0 means DefaultMaxTxnOps.
	MaxTxnOps int
	// Logger receives debug logs of commits; nil drops them.
	Logger *slog.Logger
	// KV is the raw KV API that Commit sends its transactions through.
	// nil means the client's own connection (clientv3.RetryKVClient); a
	// client with no connection, such as an embedded member's in-process
	// client, must pass one (embedetcd.Server.InProcessKV). Commit builds
	// the request itself: the client's Txn builder copies every value
	// twice (bytes to string and back) and clones every compare twice,
	// which at 2,000 workloads/s was a tenth of the hub's allocation.
	KV pb.KVClient
}

// Store reads and writes Meridian state in etcd. It is safe for concurrent
// use and holds no state of its own besides the client.
type Store struct {
	c      *clientv3.Client
	kv     pb.KVClient
	maxOps int
	log    *slog.Logger
}

// New returns a Store over client.
func New(client *clientv3.Client, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("store: client is nil")
	}
	if opts.MaxTxnOps < 0 {
		return nil, fmt.Errorf("store: Options.MaxTxnOps %d is negative", opts.MaxTxnOps)
	}
	if opts.MaxTxnOps == 0 {
		opts.MaxTxnOps = DefaultMaxTxnOps
	}
	l := opts.Logger
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	kv := opts.KV
	if kv == nil {
		if client.ActiveConnection() == nil {
			return nil, errors.New("store: the etcd client has no connection (an in-process client?): pass Options.KV")
		}
		kv = clientv3.RetryKVClient(client)
	}
	return &Store{c: client, kv: kv, maxOps: opts.MaxTxnOps, log: l}, nil
}

// Client is the underlying etcd client.
func (s *Store) Client() *clientv3.Client { return s.c }

// MaxTxnOps is the most ops one Commit accepts.
func (s *Store) MaxTxnOps() int { return s.maxOps }

// Commit applies ops atomically and returns the revision of the transaction.
// With a non-nil fence the commit only happens while that leadership term
// holds. It fails with:
//   - ErrNotLeader (wrapped) when the fence no longer holds;
//   - *ConflictError (IsConflict) naming every key whose check failed;
//   - ErrTooManyOps when len(ops) > MaxTxnOps;
//   - a plain error naming the op for invalid ops (zero Op, empty key,
//     negative revision, two ops on one key; the same Check twice is sent once).
//
// Either every op is applied or none is.
func (s *Store) Commit(ctx context.Context, fence *leader.Fence, ops ...Op) (int64, error) {
	if len(ops) == 0 {
		return 0, errors.New("store: Commit needs at least one op")
	}
	if len(ops) > s.maxOps {
		return 0, fmt.Errorf("store: commit of %d ops, limit %d: %w", len(ops), s.maxOps, ErrTooManyOps)
	}
	if fence != nil {
		if err := fence.Validate(); err != nil {
			return 0, fmt.Errorf("store: %w", err)
		}
	}
	req, checked, err := txnRequest(fence, ops)
	if err != nil {
		return 0, err
	}
	resp, err := s.kv.Txn(ctx, req)
	if err != nil {
		err = rpctypes.Error(err)
		if errors.Is(err, rpctypes.ErrTooManyOps) {
			return 0, fmt.Errorf("store: etcd refused a commit of %d ops (raise the server's --max-txn-ops or lower Options.MaxTxnOps): %w: %w", len(ops), ErrTooManyOps, err)
		}
		return 0, fmt.Errorf("store: commit %d ops: %w", len(ops), err)
	}
	inner := resp
	if fence != nil {
		if !resp.Succeeded {
			have := int64(0)
			if rr := resp.Responses[0].GetResponseRange(); rr != nil && len(rr.Kvs) == 1 {
				have = rr.Kvs[0].CreateRevision
			}
			return 0, fmt.Errorf("store: fence %s no longer holds (key create revision now %d): %w", fence, have, ErrNotLeader)
		}
		it := resp.Responses[0].GetResponseTxn()
		if it == nil {
			return 0, errors.New("store: etcd returned no nested txn response")
		}
		inner = it
	}
	if !inner.Succeeded {
		return 0, s.conflictAt(ctx, checked, resp.Header.Revision)
	}
	s.log.Debug("store commit", "ops", len(ops), "rev", resp.Header.Revision, "fenced", fence != nil)
	return resp.Header.Revision, nil
}

// txnRequest builds the etcd request of a commit: the ops' compares and
// writes, nested under the fence's compare when there is one. checked are
// the ops that compare, to explain a conflict.
func txnRequest(fence *leader.Fence, ops []Op) (req *pb.TxnRequest, checked []Op, err error) {
	seen := make(map[string]int, len(ops))
	// The request's parts are made in a few arrays rather than three or
	// four objects per op: a commit of a cycle's dispatches or a batch of
	// submits has dozens of ops, and every object is work for the
	// collector.
	keyBytes := 0
	for _, o := range ops {
		keyBytes += len(o.key)
	}
	var (
		cmps   []*pb.Compare
		keys   = make([]byte, 0, keyBytes)
		writes = make([]*pb.RequestOp, 0, len(ops))
		reqOps = make([]pb.RequestOp, 0, len(ops))
		puts   []pb.PutRequest
		putOps []pb.RequestOp_RequestPut
		cmpArr []pb.Compare
		revs   []pb.Compare_ModRevision
	)
	for i, o := range ops {
		if err := o.validate(i); err != nil {
			return nil, nil, err
		}
		if j, dup := seen[o.key]; dup {
			if ops[j].SameCheck(o) {
				continue // callers sharing a transaction may each check a key: once is enough
			}
			return nil, nil, fmt.Errorf("store: ops %d and %d both touch key %s; one op per key", j, i, o.key)
		}
		seen[o.key] = i
		keys = append(keys, o.key...)
		key := keys[len(keys)-len(o.key) : len(keys) : len(keys)]
		if o.conditional() {
			if cmps == nil {
				cmps, cmpArr, revs = make([]*pb.Compare, 0, len(ops)), make([]pb.Compare, 0, len(ops)), make([]pb.Compare_ModRevision, 0, len(ops))
				checked = make([]Op, 0, len(ops))
			}
			revs = append(revs, pb.Compare_ModRevision{ModRevision: o.modRev})
			cmpArr = append(cmpArr, pb.Compare{Key: key, Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &revs[len(revs)-1]})
			cmps = append(cmps, &cmpArr[len(cmpArr)-1])
			checked = append(checked, o)
		}
		switch o.kind {
		case opPut, opPutIfModRev:
			if puts == nil {
				puts, putOps = make([]pb.PutRequest, 0, len(ops)), make([]pb.RequestOp_RequestPut, 0, len(ops))
			}
			puts = append(puts, pb.PutRequest{Key: key, Value: o.val})
			putOps = append(putOps, pb.RequestOp_RequestPut{RequestPut: &puts[len(puts)-1]})
			reqOps = append(reqOps, pb.RequestOp{Request: &putOps[len(putOps)-1]})
			writes = append(writes, &reqOps[len(reqOps)-1])
		case opDelete, opDeleteAny:
			reqOps = append(reqOps, pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: key}}})
			writes = append(writes, &reqOps[len(reqOps)-1])
		}
	}

	// No failure branch: reading every checked key there made each
	// request (and so each raft entry) carry a read per check, though
	// commits rarely conflict. A conflict is explained afterwards by
	// reading the keys at the revision the failed txn saw.
	req = &pb.TxnRequest{Compare: cmps, Success: writes}
	if fence != nil {
		req = &pb.TxnRequest{
			Compare: []*pb.Compare{{Key: []byte(fence.Key), Target: pb.Compare_CREATE, Result: pb.Compare_EQUAL,
				TargetUnion: &pb.Compare_CreateRevision{CreateRevision: fence.Rev}}},
			Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestTxn{RequestTxn: req}}},
			Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(fence.Key), KeysOnly: true}}}},
		}
	}
	return req, checked, nil
}

// conflictAt reads the checked keys at rev, the revision a failed commit
// saw, and names those whose revision differs from what the op wanted. If
// rev is no longer readable (compacted), it reads the latest revision.
func (s *Store) conflictAt(ctx context.Context, checked []Op, rev int64) error {
	read := func(opts ...clientv3.OpOption) (*clientv3.TxnResponse, error) {
		gets := make([]clientv3.Op, 0, len(checked))
		for _, o := range checked {
			gets = append(gets, clientv3.OpGet(o.key, append([]clientv3.OpOption{clientv3.WithKeysOnly()}, opts...)...))
		}
		return s.c.Txn(ctx).Then(gets...).Commit()
	}
	resp, err := read(clientv3.WithRev(rev))
	if errors.Is(err, rpctypes.ErrCompacted) {
		resp, err = read()
	}
	if err != nil {
		return &ConflictError{Keys: []KeyConflict{{Key: "(unknown: " + err.Error() + ")"}}}
	}
	return conflictFrom(checked, resp)
}

// conflictFrom compares each checked op's wanted revision with what resp
// read for it.
func conflictFrom(checked []Op, resp *clientv3.TxnResponse) error {
	ce := &ConflictError{}
	for i, o := range checked {
		have := int64(0)
		if i < len(resp.Responses) {
			if rr := resp.Responses[i].GetResponseRange(); rr != nil && len(rr.Kvs) == 1 {
				have = rr.Kvs[0].ModRevision
			}
		}
		if have != o.modRev {
			ce.Keys = append(ce.Keys, KeyConflict{Key: o.key, Want: o.modRev, Have: have})
		}
	}
	if len(ce.Keys) == 0 {
		// The checks failed but a read at the same revision sees them
		// pass; etcd guarantees this cannot happen, so say so loudly.
		ce.Keys = append(ce.Keys, KeyConflict{Key: "(unknown)"})
	}
	return ce
}

// Item is one key as read from etcd.
type Item struct {
	Key       string
	Value     []byte
	ModRev    int64
	CreateRev int64
}

// Revision is etcd's current revision, read linearizably (one key's
// read: the answer's header carries the store's revision). The key is
// Root+"/", inside the prefix an etcd user of the hub may be limited to.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	resp, err := s.c.Get(ctx, Root+"/", clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("store: read the current revision: %w", err)
	}
	return resp.Header.Revision, nil
}

// Get reads key. A missing key is ErrNotFound (wrapped, naming the key).
func (s *Store) Get(ctx context.Context, key string) ([]byte, int64, error) {
	if key == "" {
		return nil, 0, errors.New("store: Get: key is empty")
	}
	resp, err := s.c.Get(ctx, key)
	if err != nil {
		return nil, 0, fmt.Errorf("store: get %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, fmt.Errorf("store: get %s: %w", key, ErrNotFound)
	}
	kv := resp.Kvs[0]
	return kv.Value, kv.ModRevision, nil
}

// List reads every key under prefix, all at one revision, and returns them
// in key order with that revision. It streams the range where etcd can
// (3.7's RangeStream: one pass over the range, chunks sized by the server)
// and otherwise reads pages of pageSize keys (0 means DefaultPageSize). If
// etcd compacts that revision mid-list the error wraps rpctypes.ErrCompacted
// and the caller retries.
func (s *Store) List(ctx context.Context, prefix string, pageSize int) ([]Item, int64, error) {
	return list(ctx, s.c, prefix, pageSize)
}

// list is List with extra options for every request (WithKeysOnly).
func list(ctx context.Context, kv clientv3.KV, prefix string, pageSize int, extra ...clientv3.OpOption) ([]Item, int64, error) {
	if prefix == "" {
		return nil, 0, errors.New("store: List: prefix is empty")
	}
	if pageSize < 0 {
		return nil, 0, fmt.Errorf("store: List: pageSize %d is negative", pageSize)
	}
	if pageSize == 0 {
		pageSize = DefaultPageSize
	}
	items, rev, err := listStream(ctx, kv, prefix, extra...)
	if status.Code(err) == codes.Unimplemented {
		// An etcd before 3.7, or the in-process adapter of an embedded
		// member, which has no streams.
		return listPages(ctx, kv, prefix, pageSize, extra...)
	}
	return items, rev, err
}

// listStream reads the range in one RangeStream. Unlike pages, which make
// etcd count the rest of the range for each page served (quadratic in the
// keys), a stream walks the range once.
func listStream(ctx context.Context, kv clientv3.KV, prefix string, extra ...clientv3.OpOption) ([]Item, int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the client's receiving goroutine on an early return
	ch, err := kv.GetStream(ctx, prefix, append([]clientv3.OpOption{clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix))}, extra...)...)
	if err != nil {
		return nil, 0, fmt.Errorf("store: list %s: %w", prefix, err)
	}
	var (
		items []Item
		rev   int64
	)
	for chunk := range ch {
		if err := chunk.Err(); err != nil {
			return nil, 0, fmt.Errorf("store: list %s: %w", prefix, err)
		}
		for _, kv := range chunk.Kvs {
			items = append(items, Item{Key: string(kv.Key), Value: kv.Value, ModRev: kv.ModRevision, CreateRev: kv.CreateRevision})
		}
		if h := chunk.Header; h != nil {
			rev = h.Revision // only the last chunk has a header
		}
	}
	if rev == 0 {
		return nil, 0, fmt.Errorf("store: list %s: the stream ended without its last chunk", prefix)
	}
	return items, rev, nil
}

// listPages reads the range pageSize keys per request, all at the first
// page's revision.
func listPages(ctx context.Context, kv clientv3.KV, prefix string, pageSize int, extra ...clientv3.OpOption) ([]Item, int64, error) {
	end := clientv3.GetPrefixRangeEnd(prefix)
	start := prefix
	var (
		items []Item
		rev   int64
	)
	for {
		opts := append([]clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(pageSize))}, extra...)
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := kv.Get(ctx, start, opts...)
		if err != nil {
			return nil, 0, fmt.Errorf("store: list %s at rev %d: %w", prefix, rev, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			items = append(items, Item{Key: string(kv.Key), Value: kv.Value, ModRev: kv.ModRevision, CreateRev: kv.CreateRevision})
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return items, rev, nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}
