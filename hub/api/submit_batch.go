package api

import (
	"context"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	"github.com/meridian-gpu/meridian/hub/api/validation"
	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// MaxBatchSubmit is the most workloads one SubmitWorkloads call takes.
const MaxBatchSubmit = 1000

// maxBatchViolations bounds the field violations one refused batch lists:
// a thousand copies of one mistake say no more than a hundred.
const maxBatchViolations = 100

// SubmitWorkloads stores many workloads for one queue, all in one etcd
// transaction or none: a job array is never half submitted. Each workload
// is checked as SubmitWorkload checks one; one whose idempotency key is
// already used comes back as stored (replayed), and the rest are created.
// Per workload it saves what one call costs (the gRPC round trip, the
// authentication and authorization, a place in a group commit).
func (s *Service) SubmitWorkloads(ctx context.Context, req *meridianv1.SubmitWorkloadsRequest) (*meridianv1.SubmitWorkloadsResponse, error) {
	ws := req.GetWorkloads()
	switch {
	case len(ws) == 0:
		return nil, invalid("workloads", "is required: 1 to %d workloads", MaxBatchSubmit)
	case len(ws) > MaxBatchSubmit:
		return nil, invalid("workloads", "has %d workloads; at most %d per call", len(ws), MaxBatchSubmit)
	}
	if err := checkView(req.GetView()); err != nil {
		return nil, err
	}
	if idempotencyFromMetadata(ctx) != "" {
		return nil, invalid(IdempotencyHeader, "a batch takes one idempotency key per workload, in workloads[i].idempotency_key; the header cannot say which workload it is for")
	}
	if err := checkBatch(ws); err != nil {
		return nil, err
	}
	if req.GetRejectIfNeverFits() {
		for i, w := range ws {
			if err := s.rejectIfNeverFits(ctx, w); err != nil {
				return nil, prefixStatus(err, fmt.Sprintf("workloads[%d]", i))
			}
		}
	}
	queue := ws[0].GetQueue()
	qkey, err := QueueKey(queue)
	if err != nil {
		return nil, invalid("workloads[0].queue", "%v", err)
	}
	// Every new workload is one or two ops, and the queue check one more:
	// all must fit one transaction.
	need := 1
	for _, w := range ws {
		need++
		if w.GetIdempotencyKey() != "" {
			need++
		}
	}
	if maxOps := s.submits.maxOps; maxOps > 0 && need > maxOps {
		per := (maxOps - 1) / 2
		return nil, invalid("workloads", "%d workloads need %d operations in one etcd transaction and this hub's etcd allows %d (its --max-txn-ops); send at most %d per call, or raise the limit",
			len(ws), need, maxOps, max(per, 1))
	}
	for attempt := 0; ; attempt++ {
		pf, err := s.preflightBatch(ctx, qkey, ws, attempt)
		if err != nil {
			return nil, err
		}
		if pf.queueRev == 0 {
			return nil, invalid("workloads[0].queue", "queue %q does not exist; create it first (meridianctl queue apply -f FILE, or POST /v1/queues)", queue)
		}
		if pf.children > 0 {
			return nil, invalid("workloads[0].queue", "queue %q has child queues; submit to a leaf queue below it", queue)
		}
		results := make([]*meridianv1.SubmitWorkloadResponse, len(ws))
		var (
			ops     []store.Op
			created []*meridianv1.Workload
			at      []int // created[j] is ws[at[j]]
		)
		now := s.now()
		for i, w := range ws {
			if id := pf.idemIDs[i]; id != "" {
				r, err := s.replay(ctx, w, id)
				if err != nil {
					return nil, prefixStatus(err, fmt.Sprintf("workloads[%d]", i))
				}
				results[i] = submitAnswer(r, req.GetView())
				continue
			}
			id, err := s.ids.next(now)
			if err != nil {
				return nil, status.Errorf(codes.Internal, "submit: %v", err)
			}
			stored, wops, err := s.newWorkload(ctx, w, id, now)
			if err != nil {
				return nil, err
			}
			ops = append(ops, wops...)
			created, at = append(created, stored), append(at, i)
		}
		if len(ops) == 0 {
			return &meridianv1.SubmitWorkloadsResponse{Results: results}, nil // every one a replay
		}
		ops = append(ops, store.Check(qkey, pf.queueRev))
		stored, err := s.storeNew(ctx, created, ops, req.GetStoreQueued())
		if err == nil {
			for j, w := range stored {
				results[at[j]] = submitAnswer(&meridianv1.SubmitWorkloadResponse{Workload: w}, req.GetView())
			}
			s.log.Debug("workloads submitted", "count", len(created), "queue", queue)
			return &meridianv1.SubmitWorkloadsResponse{Results: results}, nil
		}
		if !store.IsConflict(err) || attempt >= maxSubmitRetries {
			return nil, storeErr("submit workloads", err)
		}
		// The queue changed, or a submit with one of the keys won the
		// race: look again, from etcd.
	}
}

// checkBatch validates every workload of a batch and refuses, in one
// error, every violation found (up to maxBatchViolations), each named
// workloads[i].<field>: a workload naming another queue than the first,
// and an idempotency key used twice, are violations too.
func checkBatch(ws []*meridianv1.Workload) error {
	var vs []*errdetails.BadRequest_FieldViolation
	add := func(field, format string, args ...any) {
		vs = append(vs, &errdetails.BadRequest_FieldViolation{Field: field, Description: fmt.Sprintf(format, args...)})
	}
	queue := ws[0].GetQueue()
	keys := make(map[string]int, len(ws))
	for i, w := range ws {
		if len(vs) >= maxBatchViolations {
			break
		}
		at := fmt.Sprintf("workloads[%d]", i)
		if err := validation.ValidateWorkload(w); err != nil {
			for _, v := range validation.FieldViolations(err) {
				vs = append(vs, &errdetails.BadRequest_FieldViolation{Field: at + "." + v.GetField(), Description: v.GetDescription()})
			}
			continue
		}
		if w.GetQueue() != queue {
			add(at+".queue", "is %q but workloads[0] names %q: the workloads of one call share a queue; send one call per queue", w.GetQueue(), queue)
		}
		if k := w.GetIdempotencyKey(); k != "" {
			if j, dup := keys[k]; dup {
				add(at+".idempotency_key", "%q is also the key of workloads[%d]; each workload needs its own", k, j)
			} else {
				keys[k] = i
			}
		}
	}
	if len(vs) == 0 {
		return nil
	}
	if len(vs) > maxBatchViolations {
		vs = vs[:maxBatchViolations]
	}
	return validation.ViolationsError("workloads", vs)
}

// prefixStatus names the batch item an error from a single-workload check
// is about: its field violations become prefix.<field>, its message starts
// with prefix, and its code and other details stay.
func prefixStatus(err error, prefix string) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	out := status.New(st.Code(), prefix+": "+st.Message())
	var details []protoadapt.MessageV1
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.BadRequest:
			nb := &errdetails.BadRequest{}
			for _, v := range d.GetFieldViolations() {
				nb.FieldViolations = append(nb.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: prefix + "." + v.GetField(), Description: v.GetDescription()})
			}
			details = append(details, nb)
		case protoadapt.MessageV1:
			details = append(details, d)
		}
	}
	if len(details) == 0 {
		return out.Err()
	}
	if withDetails, derr := out.WithDetails(details...); derr == nil {
		return withDetails.Err()
	}
	return out.Err()
}

// batchPreflight is what a batch reads before it writes.
type batchPreflight struct {
	queueRev int64
	children int64
	idemIDs  []string // per workload: the id its idempotency key already names
}

// preflightBatch reads the queue and every idempotency key: from the watch
// cache when preflightCached gives the common answer for every workload
// (the queue is a leaf, no key is used) on a first attempt, otherwise from
// etcd. As for one submit, the commit checks the queue's revision and that
// every key is unused, so a stale read costs a retry, never a wrong write.
func (s *Service) preflightBatch(ctx context.Context, qkey string, ws []*meridianv1.Workload, attempt int) (batchPreflight, error) {
	pf := batchPreflight{idemIDs: make([]string, len(ws))}
	cached := true
	for _, w := range ws {
		one, ok := s.preflightCached(qkey, w, attempt)
		if !ok {
			cached = false
			break
		}
		pf.queueRev = one.queueRev
	}
	if cached {
		return pf, nil
	}
	one, err := s.preflight(ctx, qkey, &meridianv1.Workload{Queue: ws[0].GetQueue()})
	if err != nil {
		return pf, err
	}
	pf.queueRev, pf.children = one.queueRev, one.children
	for i, w := range ws {
		k := w.GetIdempotencyKey()
		if k == "" {
			continue
		}
		b, _, err := s.st.Get(ctx, IdempotencyKey(w.GetQueue(), k))
		switch {
		case store.IsNotFound(err):
		case err != nil:
			return pf, storeErr("read idempotency key", err)
		default:
			pf.idemIDs[i] = string(b)
		}
	}
	return pf, nil
}
