package api

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/api/validation"
	"github.com/meridian-gpu/meridian/hub/auth"
	"github.com/meridian-gpu/meridian/hub/store"
	"github.com/meridian-gpu/meridian/internal/protofast"
	"github.com/meridian-gpu/meridian/internal/telemetry"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// PendingWaitingForScheduler is the pending reason of a freshly submitted
// workload, until the scheduling loop writes its own.
const PendingWaitingForScheduler = "waiting for the scheduler"

// IdempotencyHeader is the HTTP header (and gRPC metadata key, lower-cased)
// that may carry the idempotency key instead of the body field.
const IdempotencyHeader = "Idempotency-Key"

// ConditionCancelRequested is the condition the API appends to a
// dispatched workload when a user cancels it; the loop acts on it.
const ConditionCancelRequested = "CancelRequested"

const (
	maxReasonLen    = 1024
	defaultPageSize = 100
	maxPageSize     = 1000
	listBatch       = 256
	maxScanPerList  = 20000
	// maxPageBytes ends a list page early once its workloads' encodings
	// add up to this much: with a stored workload below 2 MiB (the request
	// limit) a page stays under the 4 MiB a gRPC client accepts by default,
	// however large its workloads are.
	maxPageBytes     = 1 << 20
	maxSubmitRetries = 4
	maxCASRetries    = 8
)

// SubmitWorkload validates and stores a workload (see storeNew: with the
// leader's first decision, or QUEUED) and answers with it as stored.
func (s *Service) SubmitWorkload(ctx context.Context, req *meridianv1.SubmitWorkloadRequest) (*meridianv1.SubmitWorkloadResponse, error) {
	w := req.GetWorkload()
	if w == nil {
		return nil, invalid("workload", "is required")
	}
	if err := checkView(req.GetView()); err != nil {
		return nil, err
	}
	if hk := idempotencyFromMetadata(ctx); hk != "" {
		switch bk := w.GetIdempotencyKey(); {
		case bk == "":
			w = protofast.Clone(w)
			w.IdempotencyKey = hk
		case bk != hk:
			return nil, invalid("idempotency_key", "the body says %q but the %s header says %q; send one or make them equal", bk, IdempotencyHeader, hk)
		}
	}
	if err := validation.ValidateWorkload(w); err != nil {
		return nil, err
	}
	if req.GetRejectIfNeverFits() {
		if err := s.rejectIfNeverFits(ctx, w); err != nil {
			return nil, err
		}
	}
	qkey, err := QueueKey(w.GetQueue())
	if err != nil {
		return nil, invalid("queue", "%v", err)
	}
	for attempt := 0; ; attempt++ {
		pf, ok := s.preflightCached(qkey, w, attempt)
		if !ok {
			if pf, err = s.preflight(ctx, qkey, w); err != nil {
				return nil, err
			}
		}
		// A replay needs no queue: it returns what was stored.
		if pf.idemID != "" {
			r, err := s.replay(ctx, w, pf.idemID)
			return submitAnswer(r, req.GetView()), err
		}
		if pf.queueRev == 0 {
			return nil, invalid("queue", "queue %q does not exist; create it first (meridianctl queue apply -f FILE, or POST /v1/queues)", w.GetQueue())
		}
		if pf.children > 0 {
			return nil, invalid("queue", "queue %q has child queues; submit to a leaf queue below it", w.GetQueue())
		}
		qrev := pf.queueRev
		now := s.now()
		id, err := s.ids.next(now)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "submit: %v", err)
		}
		stored, ops, err := s.newWorkload(ctx, w, id, now)
		if err != nil {
			return nil, err
		}
		ops = append(ops, store.Check(qkey, qrev))
		out, err := s.storeNew(ctx, []*meridianv1.Workload{stored}, ops, req.GetStoreQueued())
		if err == nil {
			stored = out[0]
			if span := trace.SpanFromContext(ctx); span.IsRecording() {
				span.SetAttributes(attribute.String("meridian.workload.id", id), attribute.String("meridian.queue", stored.GetQueue()))
			}
			s.log.Debug("workload submitted", "workload", id, "queue", stored.GetQueue())
			return submitAnswer(&meridianv1.SubmitWorkloadResponse{Workload: stored}, req.GetView()), nil
		}
		if !store.IsConflict(err) || attempt >= maxSubmitRetries {
			return nil, storeErr("submit workload", err)
		}
		// The queue changed or another submit with the same key won the
		// race; look again.
	}
}

// storeNew stores new workloads ws with ops, their creates and what must
// commit with them: through the leader's scheduling loop when it takes
// them (it stores at once, already dispatched, those it can place), or in
// a group commit, QUEUED: always so with queued (the client's
// store_queued, for an answer that does not wait for a cycle). It returns
// ws as stored.
func (s *Service) storeNew(ctx context.Context, ws []*meridianv1.Workload, ops []store.Op, queued bool) ([]*meridianv1.Workload, error) {
	if s.d.Intake != nil && !queued {
		if out, taken, err := s.intake(ctx, ws, ops); taken {
			if err == nil {
				s.countStored("intake", len(ws))
			}
			return out, err
		}
	}
	err := s.submits.Commit(ctx, ops)
	if err == nil {
		s.countStored("group_commit", len(ws))
	}
	return ws, err
}

// intake offers a submit to the leader's loop, in a span of its own when
// it takes it (the loop's cycle span, which links to the submit's, is
// where the decision shows).
func (s *Service) intake(ctx context.Context, ws []*meridianv1.Workload, ops []store.Op) (out []*meridianv1.Workload, taken bool, err error) {
	ctx, span := telemetry.Start(ctx, "meridian.schedule.intake")
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("meridian.store.ops", len(ops)), attribute.Int("meridian.workloads", len(ws)))
		defer func() {
			span.SetAttributes(attribute.Bool("meridian.intake.taken", taken))
			telemetry.Fail(span, err)
			span.End()
		}()
	}
	return s.d.Intake.Submit(ctx, ws, ops)
}

func (s *Service) countStored(writer string, n int) {
	if s.d.Metrics != nil {
		s.d.Metrics.stored.WithLabelValues(writer).Add(float64(n))
	}
}

// newWorkload makes the stored form of a submitted workload (id, the
// submitter, create time, trace parent, QUEUED status) and the ops that
// create it: its key and, with an idempotency key, that key's.
func (s *Service) newWorkload(ctx context.Context, w *meridianv1.Workload, id string, now time.Time) (*meridianv1.Workload, []store.Op, error) {
	stored := protofast.Clone(w)
	stored.Id = id
	if c := callerFrom(ctx); c != nil && c.Principal.Method != auth.MethodNone {
		stored.SubmittedBy = c.Principal.User
	}
	stored.CreateTime = timestamppb.New(now)
	// The submit's span, when sampled, is where the scheduling cycle
	// and the agent continue the workload's trace.
	stored.TraceParent = ""
	if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
		stored.TraceParent = telemetry.TraceParent(sc)
	}
	stored.Status = &meridianv1.WorkloadStatus{
		Phase:             meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED,
		PendingReason:     PendingWaitingForScheduler,
		PendingReasonCode: PendingCodeWaitingForScheduler,
		UpdateTime:        timestamppb.New(now),
	}
	wkey, err := WorkloadKey(id)
	if err != nil {
		return nil, nil, status.Errorf(codes.Internal, "submit: %v", err)
	}
	b, err := marshal(stored)
	if err != nil {
		return nil, nil, status.Errorf(codes.Internal, "submit: %v", err)
	}
	ops := []store.Op{store.PutIfModRev(wkey, b, 0)}
	if k := w.GetIdempotencyKey(); k != "" {
		ops = append(ops, store.PutIfModRev(IdempotencyKey(w.GetQueue(), k), []byte(id), 0))
	}
	return stored, ops, nil
}

// preflightResult is what a submit reads before it writes.
type preflightResult struct {
	queueRev int64  // 0: the queue does not exist
	children int64  // queues below it
	idemID   string // workload id already stored for the idempotency key
}

// preflight reads the queue, counts its children and looks up the
// idempotency key in one etcd round trip. The reads are serializable (the
// member's local state, no quorum round): the commit that follows checks
// the queue's revision and that the idempotency key is still unused, so a
// stale read can only cost a retry, never a wrong write.
func (s *Service) preflight(ctx context.Context, qkey string, w *meridianv1.Workload) (preflightResult, error) {
	ops := []clientv3.Op{
		clientv3.OpGet(qkey, clientv3.WithKeysOnly(), clientv3.WithSerializable()),
		clientv3.OpGet(qkey+"/", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable()),
	}
	if k := w.GetIdempotencyKey(); k != "" {
		ops = append(ops, clientv3.OpGet(IdempotencyKey(w.GetQueue(), k), clientv3.WithSerializable()))
	}
	resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return preflightResult{}, storeErr("read queue", err)
	}
	var pf preflightResult
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) == 1 {
		pf.queueRev = kvs[0].ModRevision
	}
	pf.children = resp.Responses[1].GetResponseRange().GetCount()
	if len(resp.Responses) > 2 {
		if kvs := resp.Responses[2].GetResponseRange().GetKvs(); len(kvs) == 1 {
			pf.idemID = string(kvs[0].Value)
		}
	}
	return pf, nil
}

// preflightCached answers the preflight from the watch cache when the
// answer is the common one: the queue exists, is a leaf, and the
// idempotency key is unused. The commit checks the queue's revision and
// that the key is unused, so a stale cache costs a retry, never a wrong
// write; every other answer (and every retry) is read from etcd, so that a
// queue created a moment ago is never reported missing. Reading etcd here
// copied its uncommitted write buffer for every submit.
func (s *Service) preflightCached(qkey string, w *meridianv1.Workload, attempt int) (preflightResult, bool) {
	c := s.d.Workloads
	if c == nil || attempt > 0 {
		return preflightResult{}, false
	}
	q, ok := c.Get(qkey)
	if !ok || c.HasPrefix(qkey+"/") {
		return preflightResult{}, false
	}
	if k := w.GetIdempotencyKey(); k != "" {
		if _, used := c.Get(IdempotencyKey(w.GetQueue(), k)); used {
			return preflightResult{}, false
		}
	}
	return preflightResult{queueRev: q.ModRev}, true
}

// replay returns the workload stored under w's idempotency key (id), or a
// conflict error when the key was used for a different workload.
func (s *Service) replay(ctx context.Context, w *meridianv1.Workload, id string) (*meridianv1.SubmitWorkloadResponse, error) {
	orig, _, err := s.getWorkload(ctx, id)
	if err != nil {
		if status.Code(err) == codes.NotFound || status.Code(err) == codes.InvalidArgument {
			return nil, fieldError(codes.FailedPrecondition, "idempotency_key",
				"%q was used for workload %s, which no longer exists; use a new key", w.GetIdempotencyKey(), id)
		}
		return nil, err
	}
	if !proto.Equal(specOf(orig), specOf(w)) {
		return nil, fieldError(codes.AlreadyExists, "idempotency_key",
			"%q was already used in queue %s for workload %s with a different body; use a new key to submit a different workload",
			w.GetIdempotencyKey(), w.GetQueue(), orig.GetId())
	}
	return &meridianv1.SubmitWorkloadResponse{Workload: orig, Replayed: true}, nil
}

// specOf is what a client sends of w: without the fields the hub sets on
// submit (id, create time, status, submitter, trace parent), so that a
// retry compares equal to the stored workload whoever submitted it.
func specOf(w *meridianv1.Workload) *meridianv1.Workload {
	spec := protofast.Clone(w)
	spec.Id, spec.CreateTime, spec.Status, spec.SubmittedBy, spec.TraceParent = "", nil, nil, "", ""
	return spec
}

func idempotencyFromMetadata(ctx context.Context) string {
	for _, k := range []string{"idempotency-key", "grpcgateway-idempotency-key"} {
		if v := metadata.ValueFromIncomingContext(ctx, k); len(v) > 0 && v[0] != "" {
			return v[0]
		}
	}
	return ""
}

// checkID validates a workload id from a request.
func checkID(id string) error {
	if id == "" {
		return invalid("id", "is required")
	}
	if !validWorkloadID(id) {
		return invalid("id", "%q is not a workload id (want %s followed by 26 base32 characters)", truncate(id, 80), WorkloadIDPrefix)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// getWorkload reads one workload and its mod revision.
func (s *Service) getWorkload(ctx context.Context, id string) (*meridianv1.Workload, int64, error) {
	if err := checkID(id); err != nil {
		return nil, 0, err
	}
	key, err := WorkloadKey(id)
	if err != nil {
		return nil, 0, invalid("id", "%v", err)
	}
	b, rev, err := s.st.Get(ctx, key)
	if store.IsNotFound(err) {
		return nil, 0, status.Errorf(codes.NotFound, "workload %s not found", id)
	}
	if err != nil {
		return nil, 0, storeErr("read workload", err)
	}
	w, err := DecodeWorkloadRecord(b)
	if err != nil {
		return nil, 0, status.Errorf(codes.Internal, "workload %s: %v", id, err)
	}
	return w, rev, nil
}

// GetWorkload returns one workload.
func (s *Service) GetWorkload(ctx context.Context, req *meridianv1.GetWorkloadRequest) (*meridianv1.Workload, error) {
	w, _, err := s.getWorkload(ctx, req.GetId())
	return w, err
}

// pageToken is the opaque list cursor: the last key returned and a hash
// of the filters it was made for.
type pageToken struct {
	Last   string `json:"l"`
	Filter string `json:"f"`
}

func encodeToken(t pageToken) string {
	b, _ := json.Marshal(t)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeToken(s, filter string) (pageToken, error) {
	var t pageToken
	if len(s) > 2048 {
		return t, invalid("page_token", "is %d characters; it is not a token this server issued", len(s))
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return t, invalid("page_token", "is not a token this server issued (bad encoding)")
	}
	if err := json.Unmarshal(b, &t); err != nil || t.Last == "" {
		return t, invalid("page_token", "is not a token this server issued (bad content)")
	}
	if t.Filter != filter {
		return t, invalid("page_token", "was issued for a request with different filters; send the same filters as the request that returned it")
	}
	return t, nil
}

func filterHash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s;", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func pageSize(field string, n int32) (int, error) {
	switch {
	case n < 0:
		return 0, invalid(field, "must not be negative (got %d)", n)
	case n > maxPageSize:
		return 0, invalid(field, "must be at most %d (got %d)", maxPageSize, n)
	case n == 0:
		return defaultPageSize, nil
	}
	return int(n), nil
}

// ListWorkloads lists workloads newest first, a page at a time.
func (s *Service) ListWorkloads(ctx context.Context, req *meridianv1.ListWorkloadsRequest) (*meridianv1.ListWorkloadsResponse, error) {
	size, err := pageSize("page_size", req.GetPageSize())
	if err != nil {
		return nil, err
	}
	if q := req.GetQueue(); q != "" {
		if err := validation.CheckQueuePath(q); err != nil {
			return nil, invalid("queue", "%v", err)
		}
	}
	for i, p := range req.GetPhase() {
		if _, ok := meridianv1.WorkloadPhase_name[int32(p)]; !ok {
			return nil, invalid(fmt.Sprintf("phase[%d]", i), "unknown phase %d", p)
		}
	}
	if c := req.GetCluster(); len(c) > 253 {
		return nil, invalid("cluster", "is %d characters; at most 253", len(c))
	}
	sel, err := parseSelector(req.GetLabelSelector())
	if err != nil {
		return nil, invalid("label_selector", "%v", err)
	}
	phases := make([]string, 0, len(req.GetPhase()))
	for _, p := range req.GetPhase() {
		phases = append(phases, p.String())
	}
	slices.Sort(phases)
	fh := filterHash(req.GetQueue(), strings.Join(phases, ","), req.GetCluster(), req.GetLabelSelector())
	prefix := store.Prefix(store.KindWorkloads)
	below := "" // the newest workload first
	if tok := req.GetPageToken(); tok != "" {
		t, err := decodeToken(tok, fh)
		if err != nil {
			return nil, err
		}
		if !validWorkloadID(t.Last) {
			return nil, invalid("page_token", "is not a token this server issued (bad position)")
		}
		below = prefix + t.Last
	}
	match := func(w *meridianv1.Workload) bool {
		if !queueMatches(req.GetQueue(), w.GetQueue()) || !canView(ctx, w.GetQueue()) {
			return false
		}
		if len(req.GetPhase()) > 0 && !slices.Contains(req.GetPhase(), w.GetStatus().GetPhase()) {
			return false
		}
		if c := req.GetCluster(); c != "" && w.GetStatus().GetCluster() != c {
			return false
		}
		return sel.matches(w.GetLabels())
	}
	next := s.etcdBatches(ctx, prefix)
	if s.d.Workloads != nil {
		var err error
		if next, err = s.cacheBatches(ctx, prefix); err != nil {
			return nil, err
		}
	}
	out := &meridianv1.ListWorkloadsResponse{}
	scanned, pageBytes := 0, 0
	for {
		batch, more, err := next(below)
		if err != nil {
			return nil, err
		}
		for i, it := range batch {
			scanned++
			w, err := DecodeWorkloadRecord(it.Value)
			if err != nil {
				s.log.Error("skipping undecodable workload record", "key", it.Key, "err", err)
			} else if match(w) {
				out.Workloads = append(out.Workloads, w)
				pageBytes += len(it.Value)
			}
			full := len(out.Workloads) == size || pageBytes >= maxPageBytes || scanned >= maxScanPerList
			if full && (i < len(batch)-1 || more) {
				out.NextPageToken = encodeToken(pageToken{Last: strings.TrimPrefix(it.Key, prefix), Filter: fh})
				return out, nil
			}
		}
		if !more || len(batch) == 0 {
			return out, nil
		}
		below = batch[len(batch)-1].Key
	}
}

// workloadBatches returns up to listBatch workload records with keys
// below below ("" means from the newest), newest first, and whether more
// follow.
type workloadBatches func(below string) ([]store.Item, bool, error)

// cacheBatches reads the watch cache's ordered index. etcd cannot read a
// range in descending order with a limit (it reads the whole range and
// sorts it), which made every page cost as much as listing every workload;
// the cache reads only what a page needs. The cache first catches up with
// etcd, so a list sees every write that finished before it (as a read from
// etcd would).
func (s *Service) cacheBatches(ctx context.Context, prefix string) (workloadBatches, error) {
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithKeysOnly())
	if err != nil {
		return nil, storeErr("list workloads", err)
	}
	if err := s.d.Workloads.WaitForRevision(ctx, resp.Header.Revision); err != nil {
		return nil, storeErr("list workloads: waiting for the watch cache", err)
	}
	return func(below string) ([]store.Item, bool, error) {
		// One more than a batch, to know whether anything follows it.
		var batch []store.Item
		s.d.Workloads.Descend(prefix, below, listBatch+1, func(it store.Item) bool {
			batch = append(batch, it)
			return true
		})
		more := len(batch) > listBatch
		return batch[:min(len(batch), listBatch)], more, nil
	}, nil
}

// etcdBatches reads etcd, every batch at the revision of the first, for a
// service without a watch cache.
func (s *Service) etcdBatches(ctx context.Context, prefix string) workloadBatches {
	var rev int64
	return func(below string) ([]store.Item, bool, error) {
		end := below
		if end == "" {
			end = clientv3.GetPrefixRangeEnd(prefix)
		}
		opts := []clientv3.OpOption{
			clientv3.WithRange(end),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend),
			clientv3.WithLimit(listBatch),
		}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := s.cli.Get(ctx, prefix, opts...)
		if err != nil {
			return nil, false, storeErr("list workloads", err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		batch := make([]store.Item, 0, len(resp.Kvs))
		for _, kv := range resp.Kvs {
			batch = append(batch, store.Item{Key: string(kv.Key), Value: kv.Value})
		}
		return batch, resp.More, nil
	}
}

// CancelWorkload asks the leader's loop to cancel a workload: it stores a
// cancel request (its own key, so that only the loop writes a workload
// after its creation; docs/design/single-writer-workloads.md) and waits,
// bounded, for the loop to act: a queued workload then comes back
// CANCELLED, a dispatched one with the CancelRequested condition while its
// cluster stops it. A terminal workload comes back unchanged. When the
// loop has not acted within the bound (no leader, say), the answer is the
// workload as stored with the request's condition added; the request
// stays until a leader acts on it.
func (s *Service) CancelWorkload(ctx context.Context, req *meridianv1.CancelWorkloadRequest) (*meridianv1.Workload, error) {
	if err := checkID(req.GetId()); err != nil {
		return nil, err
	}
	if r := req.GetReason(); len(r) > maxReasonLen {
		return nil, invalid("reason", "is %d bytes; at most %d", len(r), maxReasonLen)
	}
	w, rev, err := s.getWorkload(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	if cancelSettled(w) {
		return w, nil
	}
	msg := "cancelled by user"
	if r := req.GetReason(); r != "" {
		msg += ": " + r
	}
	cond := &meridianv1.Condition{
		Type: ConditionCancelRequested, Status: meridianv1.ConditionStatus_CONDITION_STATUS_TRUE,
		Reason: "UserRequested", Message: msg, LastTransitionTime: timestamppb.New(s.now()),
	}
	b, err := marshal(cond)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "cancel: %v", err)
	}
	rkey, _ := CancelRequestKey(req.GetId())
	// Create only: a second cancel while the first waits is the same
	// request, and keeps the first one's reason and time.
	if _, err := s.st.Commit(ctx, nil, store.PutIfModRev(rkey, b, 0)); err != nil && !store.IsConflict(err) {
		return nil, storeErr("cancel workload", err)
	}
	if got, ok := s.awaitCancel(ctx, req.GetId(), rev); ok {
		return got, nil
	}
	st := w.GetStatus()
	if st == nil {
		st = &meridianv1.WorkloadStatus{}
		w.Status = st
	}
	st.Conditions = append(st.Conditions, cond)
	return w, nil
}

// cancelSettled says whether a cancel has nothing left to ask of w: it is
// terminal, or the loop already carries a cancel request on it.
func cancelSettled(w *meridianv1.Workload) bool {
	st := w.GetStatus()
	return IsTerminal(st.GetPhase()) || hasCondition(st, ConditionCancelRequested)
}

// defaultCancelWait bounds how long CancelWorkload waits for the loop: a
// few cycles, on a busy hub.
const defaultCancelWait = 2 * time.Second

// awaitCancel waits, at most Deps.CancelWait, for the loop to act on a
// cancel request of workload id (stored at rev when the request was
// made), and returns the workload once it has.
func (s *Service) awaitCancel(ctx context.Context, id string, rev int64) (*meridianv1.Workload, bool) {
	wait := s.d.CancelWait
	if wait == 0 {
		wait = defaultCancelWait
	}
	if wait < 0 {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	// Woken by the cache's change signal when there is a cache (the read
	// is then a map lookup, and a decode only of a revision not seen
	// yet: the signal is the cache's, for every key), by a 25 ms tick
	// reading etcd otherwise.
	key, _ := WorkloadKey(id)
	c := s.d.Workloads
	var wake <-chan struct{}
	if c != nil {
		ch, unsub := c.Notify()
		defer unsub()
		wake = ch
	}
	poll := time.NewTicker(25 * time.Millisecond)
	defer poll.Stop()
	var tick <-chan time.Time // etcd's poll: only without the cache's signal
	if wake == nil {
		tick = poll.C
	}
	seen := rev
	for {
		var w *meridianv1.Workload
		if wake != nil {
			if it, ok := c.Get(key); ok && it.ModRev > seen {
				seen = it.ModRev
				w, _ = DecodeWorkloadRecord(it.Value)
			}
		} else if got, grev, err := s.getWorkload(ctx, id); err == nil && grev > rev {
			w = got
		} else if status.Code(err) == codes.NotFound {
			return nil, false
		}
		if w != nil && cancelSettled(w) {
			return w, true
		}
		select {
		case <-ctx.Done():
			return nil, false
		case _, ok := <-wake:
			if !ok {
				wake, tick = nil, poll.C // the cache stopped: read etcd from now on
			}
		case <-tick:
		}
	}
}

func hasCondition(st *meridianv1.WorkloadStatus, typ string) bool {
	for _, c := range st.GetConditions() {
		if c.GetType() == typ && c.GetStatus() == meridianv1.ConditionStatus_CONDITION_STATUS_TRUE {
			return true
		}
	}
	return false
}
