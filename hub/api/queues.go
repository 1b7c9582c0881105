package api

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/api/validation"
	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// maxNamedWorkloads bounds how many blocking workloads an error lists.
const maxNamedWorkloads = 10

// specRevision is the revision clients see and compare (the body's
// `revision`, the ETag): the store revision of the last write that changed
// the queue's own spec. A stored record's revision field is 0 after a spec
// write (the record's mod revision is then the spec revision) and carries
// the spec revision through writes that only fence (CreateQueue rewrites
// the parent unchanged so racing submits look again). The store compares
// mod revisions; clients never see them.
func specRevision(stored *meridianv1.Queue, modRev int64) int64 {
	if r := stored.GetRevision(); r > 0 {
		return r
	}
	return modRev
}

// fillQueue makes a stored record (at store revision rev) an API answer.
func (s *Service) fillQueue(q *meridianv1.Queue, rev int64) *meridianv1.Queue {
	q.Revision = specRevision(q, rev)
	if s.d.QueueStatus != nil {
		if st := s.d.QueueStatus.QueueStatus(q.GetPath()); st != nil {
			q.Status = proto.Clone(st).(*meridianv1.QueueStatus)
		}
	}
	return q
}

func (s *Service) getQueue(ctx context.Context, path string) (*meridianv1.Queue, int64, error) {
	if err := validation.CheckQueuePath(path); err != nil {
		return nil, 0, invalid("path", "%v", err)
	}
	key, err := QueueKey(path)
	if err != nil {
		return nil, 0, invalid("path", "%v", err)
	}
	b, rev, err := s.st.Get(ctx, key)
	if store.IsNotFound(err) {
		return nil, 0, status.Errorf(codes.NotFound, "queue %s not found", path)
	}
	if err != nil {
		return nil, 0, storeErr("read queue", err)
	}
	q, err := DecodeQueueRecord(b)
	if err != nil {
		return nil, 0, status.Errorf(codes.Internal, "queue %s: %v", path, err)
	}
	return q, rev, nil
}

// CreateQueue stores a new queue below an existing parent.
func (s *Service) CreateQueue(ctx context.Context, req *meridianv1.CreateQueueRequest) (*meridianv1.Queue, error) {
	q := req.GetQueue()
	if q == nil {
		return nil, invalid("queue", "is required")
	}
	if err := validation.ValidateQueue(q); err != nil {
		return nil, err
	}
	if q.GetRevision() != 0 {
		return nil, invalid("revision", "is output only on create and must be 0 (got %d)", q.GetRevision())
	}
	path := q.GetPath()
	key, _ := QueueKey(path)
	ops := []store.Op{}
	if i := strings.LastIndexByte(path, '/'); i > 0 {
		parent := path[:i]
		pkey, _ := QueueKey(parent)
		pval, prev, err := s.st.Get(ctx, pkey)
		if store.IsNotFound(err) {
			return nil, invalid("path", "parent queue %q does not exist; create it first", parent)
		}
		if err != nil {
			return nil, storeErr("read parent queue", err)
		}
		pq, err := DecodeQueueRecord(pval)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "queue %s: %v", parent, err)
		}
		if pq.GetRevision() == 0 {
			// Keep the parent's spec revision across the fencing write.
			pq.Revision = prev
			if pval, err = marshal(pq); err != nil {
				return nil, status.Errorf(codes.Internal, "create queue: %v", err)
			}
		}
		blocking, _, err := s.nonTerminalWorkloads(ctx, parent, false)
		if err != nil {
			return nil, err
		}
		if len(blocking) > 0 {
			return nil, fieldError(codes.FailedPrecondition, "path",
				"parent queue %q still has non-terminal workloads (%s); a queue with children cannot hold workloads", parent, names(blocking))
		}
		// Rewrite the parent's spec unchanged rather than only checking it:
		// its store revision moves, so a submit that saw it as a leaf (and
		// commits against that revision) is refused and looks again. Its
		// spec revision (what clients compare) stays.
		ops = append(ops, store.PutIfModRev(pkey, pval, prev))
	}
	now := timestamppb.New(s.now())
	stored := proto.Clone(q).(*meridianv1.Queue)
	stored.CreateTime, stored.UpdateTime, stored.Revision, stored.Status = now, now, 0, nil
	b, err := marshal(stored)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "create queue: %v", err)
	}
	ops = append(ops, store.PutIfModRev(key, b, 0))
	rev, err := s.st.Commit(ctx, nil, ops...)
	if err != nil {
		if ce, ok := err.(*store.ConflictError); ok {
			for _, k := range ce.Keys {
				if k.Key == key {
					return nil, fieldError(codes.AlreadyExists, "path", "queue %q already exists", path)
				}
			}
			return nil, status.Errorf(codes.Aborted, "create queue %s: its parent changed meanwhile; retry", path)
		}
		return nil, storeErr("create queue", err)
	}
	s.awaitCache(ctx, rev)
	return s.fillQueue(stored, rev), nil
}

// awaitCacheLimit bounds awaitCache.
const awaitCacheLimit = time.Second

// awaitCache waits (at most awaitCacheLimit) until the hub's watch cache holds a
// queue write this replica just committed. The guard rebuilds its
// authorizer from that cache after every queue write; without the wait
// it could rebuild from a cache that had not yet seen the write, and the
// writer's next request, or a Watch opened then (which keeps the
// authorizer it started with), would not see the new access list. The
// write has happened either way: a wait that ends early is only logged.
func (s *Service) awaitCache(ctx context.Context, rev int64) {
	if s.d.Workloads == nil {
		return
	}
	// Bounded: a cache that stopped following etcd must not hold every
	// queue write for the caller's whole deadline. After the bound the
	// guard's own periodic check (policyCheckEvery) catches up anyway.
	ctx, cancel := context.WithTimeout(ctx, awaitCacheLimit)
	defer cancel()
	if err := s.d.Workloads.WaitForRevision(ctx, rev); err != nil {
		s.log.Warn("queue write committed, but the watch cache did not reach it before the request ended", "rev", rev, "err", err)
	}
}

// updatableQueueFields are the paths UpdateQueue accepts in update_mask.
var updatableQueueFields = map[string]bool{"weight": true, "quotas": true, "description": true, "access": true, "submit_policy": true}

// UpdateQueue changes a queue's weight, quotas, description, access list
// or submit policy.
func (s *Service) UpdateQueue(ctx context.Context, req *meridianv1.UpdateQueueRequest) (*meridianv1.Queue, error) {
	in := req.GetQueue()
	if in == nil {
		return nil, invalid("queue", "is required")
	}
	if err := validation.ValidateQueue(in); err != nil {
		return nil, err
	}
	fields := map[string]bool{}
	for i, p := range req.GetUpdateMask().GetPaths() {
		top, _, _ := strings.Cut(p, ".")
		switch {
		case updatableQueueFields[top]:
			fields[top] = true
		case top == "path" || top == "revision":
			// Identity and precondition, not updates; the gateway puts
			// them in the mask when they appear in a PATCH body.
		default:
			return nil, invalid(fmt.Sprintf("update_mask.paths[%d]", i), "%q cannot be updated; use weight, quotas, description, access or submit_policy", p)
		}
	}
	if len(req.GetUpdateMask().GetPaths()) == 0 {
		fields = updatableQueueFields
	}
	key, _ := QueueKey(in.GetPath())
	for attempt := 0; attempt < maxCASRetries; attempt++ {
		cur, rev, err := s.getQueue(ctx, in.GetPath())
		if err != nil {
			return nil, err
		}
		specRev := specRevision(cur, rev)
		if in.GetRevision() != 0 && in.GetRevision() != specRev {
			return nil, fieldError(codes.FailedPrecondition, "revision", "queue %s is at revision %d, not %d; read it again and retry", in.GetPath(), specRev, in.GetRevision())
		}
		if err := checkIfMatch(ctx, in.GetPath(), specRev); err != nil {
			return nil, err
		}
		if len(fields) == 0 {
			// The mask named only path or revision: nothing to write.
			return s.fillQueue(cur, rev), nil
		}
		if fields["weight"] {
			cur.Weight = in.GetWeight()
		}
		if fields["quotas"] {
			cur.Quotas = in.GetQuotas()
		}
		if fields["description"] {
			cur.Description = in.GetDescription()
		}
		if fields["access"] {
			cur.Access = in.GetAccess()
		}
		if fields["submit_policy"] {
			cur.SubmitPolicy = in.GetSubmitPolicy()
		}
		cur.UpdateTime = timestamppb.New(s.now())
		cur.Status, cur.Revision = nil, 0
		b, err := marshal(cur)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "update queue: %v", err)
		}
		nrev, err := s.st.Commit(ctx, nil, store.PutIfModRev(key, b, rev))
		if err == nil {
			s.awaitCache(ctx, nrev)
			return s.fillQueue(cur, nrev), nil
		}
		if !store.IsConflict(err) {
			return nil, storeErr("update queue", err)
		}
		// Conflict: retry on a fresh read. With a revision or If-Match the
		// fresh read's spec revision decides: a fencing write (a child
		// queue created meanwhile) leaves it, a spec change fails above.
	}
	return nil, status.Errorf(codes.Aborted, "update queue %s: it kept changing; retry", in.GetPath())
}

// GetQueue returns one queue with its status.
func (s *Service) GetQueue(ctx context.Context, req *meridianv1.GetQueueRequest) (*meridianv1.Queue, error) {
	q, rev, err := s.getQueue(ctx, req.GetPath())
	if err != nil {
		return nil, err
	}
	return s.fillQueue(q, rev), nil
}

// ListQueues lists queues in path order.
func (s *Service) ListQueues(ctx context.Context, req *meridianv1.ListQueuesRequest) (*meridianv1.ListQueuesResponse, error) {
	size, err := pageSize("page_size", req.GetPageSize())
	if err != nil {
		return nil, err
	}
	prefix := req.GetPrefix()
	if prefix != "" {
		if err := validation.CheckQueuePath(prefix); err != nil {
			return nil, invalid("prefix", "%v", err)
		}
	}
	fh := filterHash(prefix)
	root := store.Prefix(store.KindQueues)
	start := root
	if prefix != "" {
		start = root + prefix
	}
	if tok := req.GetPageToken(); tok != "" {
		t, err := decodeToken(tok, fh)
		if err != nil {
			return nil, err
		}
		if validation.CheckQueuePath(t.Last) != nil {
			return nil, invalid("page_token", "is not a token this server issued (bad position)")
		}
		start = root + t.Last + "\x00"
	}
	end := clientv3.GetPrefixRangeEnd(root)
	out := &meridianv1.ListQueuesResponse{}
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(listBatch)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := s.cli.Get(ctx, start, opts...)
		if err != nil {
			return nil, storeErr("list queues", err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			path := strings.TrimPrefix(string(kv.Key), root)
			if prefix != "" && !queueMatches(prefix, path) {
				if path > prefix+"/" {
					// Past every descendant of prefix ('/' sorts after '-').
					return out, nil
				}
				continue
			}
			if !canView(ctx, path) {
				continue
			}
			q, err := DecodeQueueRecord(kv.Value)
			if err != nil {
				s.log.Error("skipping undecodable queue record", "key", string(kv.Key), "err", err)
				continue
			}
			if len(out.Queues) == size {
				out.NextPageToken = encodeToken(pageToken{Last: out.Queues[len(out.Queues)-1].GetPath(), Filter: fh})
				return out, nil
			}
			out.Queues = append(out.Queues, s.fillQueue(q, kv.ModRevision))
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out, nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// DeleteQueue removes a queue that has no children and no non-terminal
// workloads.
func (s *Service) DeleteQueue(ctx context.Context, req *meridianv1.DeleteQueueRequest) (*emptypb.Empty, error) {
	path := req.GetPath()
	cur, rev, err := s.getQueue(ctx, path)
	if err != nil {
		return nil, err
	}
	if err := checkIfMatch(ctx, path, specRevision(cur, rev)); err != nil {
		return nil, err
	}
	key, _ := QueueKey(path)
	for attempt := 0; attempt < maxCASRetries; attempt++ {
		blocking, listRev, err := s.nonTerminalWorkloads(ctx, path, true)
		if err != nil {
			return nil, err
		}
		if len(blocking) > 0 {
			noun := "unfinished workloads"
			if len(blocking) == 1 {
				noun = "unfinished workload"
			}
			return nil, fieldError(codes.FailedPrecondition, "path",
				"queue %s still has %d %s: %s; cancel them or wait for them to finish", path, len(blocking), noun, names(blocking))
		}
		wprefix := store.Prefix(store.KindWorkloads)
		// One transaction: the queue is unchanged, it has no children, and
		// no workload was created since the scan above.
		resp, err := s.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(key), "=", rev),
			clientv3.Compare(clientv3.CreateRevision(key+"/"), "=", 0).WithPrefix(),
			clientv3.Compare(clientv3.CreateRevision(wprefix), "<", listRev+1).WithPrefix(),
		).Then(clientv3.OpDelete(key)).Commit()
		if err != nil {
			return nil, storeErr("delete queue", err)
		}
		if resp.Succeeded {
			s.awaitCache(ctx, resp.Header.Revision)
			return &emptypb.Empty{}, nil
		}
		// Find out which check failed.
		cresp, err := s.cli.Get(ctx, key+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return nil, storeErr("delete queue", err)
		}
		if cresp.Count > 0 {
			return nil, fieldError(codes.FailedPrecondition, "path", "queue %s has %d child queue(s); delete them first", path, cresp.Count)
		}
		cur, rev, err = s.getQueue(ctx, path)
		if err != nil {
			return nil, err
		}
		if err := checkIfMatch(ctx, path, specRevision(cur, rev)); err != nil {
			return nil, err
		}
	}
	return nil, status.Errorf(codes.Aborted, "delete queue %s: workloads kept arriving; retry", path)
}

// nonTerminalWorkloads lists the ids of workloads in queue (and, with
// below, in queues under it) that are not in a terminal phase, and the
// revision of the scan for the caller's transaction.
func (s *Service) nonTerminalWorkloads(ctx context.Context, queue string, below bool) ([]string, int64, error) {
	items, rev, err := s.st.List(ctx, store.Prefix(store.KindWorkloads), 0)
	if err != nil {
		return nil, 0, storeErr("scan workloads", err)
	}
	var ids []string
	for _, it := range items {
		w, err := DecodeWorkloadRecord(it.Value)
		if err != nil {
			continue
		}
		inQueue := w.GetQueue() == queue || (below && strings.HasPrefix(w.GetQueue(), queue+"/"))
		if inQueue && !IsTerminal(w.GetStatus().GetPhase()) {
			ids = append(ids, w.GetId())
		}
	}
	return ids, rev, nil
}

func names(ids []string) string {
	if len(ids) > maxNamedWorkloads {
		return strings.Join(ids[:maxNamedWorkloads], ", ") + fmt.Sprintf(" and %d more", len(ids)-maxNamedWorkloads)
	}
	return strings.Join(ids, ", ")
}
