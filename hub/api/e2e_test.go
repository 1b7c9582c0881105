package api

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/meridian-gpu/meridian/hub/store"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

func TestRESTEndToEnd(t *testing.T) {
	e := newEnv(t)
	tn := tenant(t)
	leaf := tn + "/vision/train"
	for _, p := range []string{tn, tn + "/vision", leaf} {
		var q meridianv1.Queue
		e.rest(t, "POST", "/v1/queues", mustJSON(t, &meridianv1.Queue{Path: p, Weight: 2}), nil).decode(t, &q)
		if q.GetPath() != p || q.GetCreateTime() == nil || q.GetRevision() == 0 {
			t.Fatalf("created queue %+v", &q)
		}
	}
	var got meridianv1.Queue
	e.rest(t, "GET", "/v1/queues/"+leaf, nil, nil).decode(t, &got)
	if got.GetPath() != leaf || got.GetWeight() != 2 {
		t.Fatalf("GET queue = %v", &got)
	}

	// Submit.
	var sub meridianv1.SubmitWorkloadResponse
	e.rest(t, "POST", "/v1/workloads", mustJSON(t, validWorkload(leaf)), nil).decode(t, &sub)
	w := sub.GetWorkload()
	if !validWorkloadID(w.GetId()) || sub.GetReplayed() {
		t.Fatalf("submit returned id %q replayed %v", w.GetId(), sub.GetReplayed())
	}
	if w.GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED || w.GetStatus().GetPendingReason() != PendingWaitingForScheduler || w.GetCreateTime() == nil {
		t.Fatalf("submitted workload status %v", w.GetStatus())
	}
	var fetched meridianv1.Workload
	e.rest(t, "GET", "/v1/workloads/"+w.GetId(), nil, nil).decode(t, &fetched)
	if !proto.Equal(&fetched, w) {
		t.Fatalf("GET returned %v, want %v", &fetched, w)
	}

	// Five more, then page through them two at a time: newest first.
	ids := []string{w.GetId()}
	for i := 0; i < 5; i++ {
		var r meridianv1.SubmitWorkloadResponse
		e.rest(t, "POST", "/v1/workloads", mustJSON(t, validWorkload(leaf)), nil).decode(t, &r)
		ids = append(ids, r.GetWorkload().GetId())
	}
	slices.Reverse(ids)
	var listed []string
	token := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("pagination did not end")
		}
		q := url.Values{"queue": {tn}, "pageSize": {"2"}}
		if token != "" {
			q.Set("pageToken", token)
		}
		var page meridianv1.ListWorkloadsResponse
		e.rest(t, "GET", "/v1/workloads?"+q.Encode(), nil, nil).decode(t, &page)
		if len(page.GetWorkloads()) > 2 {
			t.Fatalf("page of %d, asked for 2", len(page.GetWorkloads()))
		}
		for _, x := range page.GetWorkloads() {
			listed = append(listed, x.GetId())
		}
		if token = page.GetNextPageToken(); token == "" {
			break
		}
	}
	if !slices.Equal(listed, ids) {
		t.Fatalf("listed %v\nwant newest first %v", listed, ids)
	}

	// Cancel a queued workload: it becomes CANCELLED at once; again is a no-op.
	var c meridianv1.Workload
	e.rest(t, "POST", "/v1/workloads/"+w.GetId()+":cancel", []byte(`{"reason":"wrong data set"}`), nil).decode(t, &c)
	if c.GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED || c.GetStatus().GetEndTime() == nil || !strings.Contains(c.GetStatus().GetMessage(), "wrong data set") {
		t.Fatalf("cancelled workload status %v", c.GetStatus())
	}
	var again meridianv1.Workload
	e.rest(t, "POST", "/v1/workloads/"+w.GetId()+":cancel", []byte(`{}`), nil).decode(t, &again)
	if !proto.Equal(&again, &c) {
		t.Fatalf("second cancel changed the workload: %v", &again)
	}
	// Phase filter over REST.
	var cancelled meridianv1.ListWorkloadsResponse
	e.rest(t, "GET", "/v1/workloads?queue="+leaf+"&phase=WORKLOAD_PHASE_CANCELLED", nil, nil).decode(t, &cancelled)
	if len(cancelled.GetWorkloads()) != 1 || cancelled.GetWorkloads()[0].GetId() != w.GetId() {
		t.Fatalf("phase filter returned %v", cancelled.GetWorkloads())
	}

	// Idempotent resubmit through the header: same workload, nothing new stored.
	hdr := map[string]string{IdempotencyHeader: "run-42"}
	var first, second meridianv1.SubmitWorkloadResponse
	e.rest(t, "POST", "/v1/workloads", mustJSON(t, validWorkload(leaf)), hdr).decode(t, &first)
	before := e.keyCount(t)
	e.rest(t, "POST", "/v1/workloads", mustJSON(t, validWorkload(leaf)), hdr).decode(t, &second)
	if !second.GetReplayed() || second.GetWorkload().GetId() != first.GetWorkload().GetId() || first.GetReplayed() {
		t.Fatalf("replay: first %v/%v second %v/%v", first.GetWorkload().GetId(), first.GetReplayed(), second.GetWorkload().GetId(), second.GetReplayed())
	}
	if after := e.keyCount(t); after != before {
		t.Fatalf("replay stored %d keys", after-before)
	}
	// Same key, different body: refused, naming idempotency_key.
	other := validWorkload(leaf)
	other.Priority = 7
	r := e.rest(t, "POST", "/v1/workloads", mustJSON(t, other), hdr)
	if r.code != http.StatusConflict {
		t.Fatalf("reuse of key with another body: HTTP %d %s", r.code, r.body)
	}
	if st := r.status(t); st.Code() != codes.AlreadyExists || !slices.Contains(fields(st.Err()), "idempotency_key") {
		t.Fatalf("reuse of key: %v fields %v", st.Err(), fields(st.Err()))
	}

	// Explain without an Explainer answers from the stored reason.
	var ex meridianv1.ExplainWorkloadResponse
	e.rest(t, "GET", "/v1/workloads/"+ids[0]+":explain", nil, nil).decode(t, &ex)
	if ex.GetPendingReason() != PendingWaitingForScheduler || ex.GetWorkloadId() != ids[0] {
		t.Fatalf("explain = %v", &ex)
	}
	// Health and metrics-free admin answer over REST.
	var h meridianv1.Health
	e.rest(t, "GET", "/v1/admin/health", nil, nil).decode(t, &h)
	if h.GetStatus() != meridianv1.HealthStatus_HEALTH_STATUS_SERVING || len(h.GetComponents()) == 0 || h.GetComponents()[0].GetName() != "etcd" {
		t.Fatalf("health = %v", &h)
	}
}

func TestGRPCEndToEnd(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	tn := tenant(t)
	leaf := tn + "/nlp"
	e.mkQueues(t, tn, leaf)

	wl := validWorkload(leaf)
	wl.IdempotencyKey = "batch-7"
	first, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: wl})
	if err != nil {
		t.Fatal(err)
	}
	again, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: wl})
	if err != nil {
		t.Fatal(err)
	}
	if !again.GetReplayed() || again.GetWorkload().GetId() != first.GetWorkload().GetId() {
		t.Fatalf("replay over gRPC: %v", again)
	}
	// Metadata key equal to the body key is fine; a different one is refused.
	mctx := metadata.AppendToOutgoingContext(ctx, "idempotency-key", "other")
	_, err = e.wl.SubmitWorkload(mctx, &meridianv1.SubmitWorkloadRequest{Workload: wl})
	wantCode(t, err, codes.InvalidArgument)
	if !slices.Contains(fields(err), "idempotency_key") {
		t.Fatalf("fields %v", fields(err))
	}

	// The same key in another queue is a different key.
	e.mkQueues(t, tn+"/cv")
	wl2 := proto.Clone(wl).(*meridianv1.Workload)
	wl2.Queue = tn + "/cv"
	r2, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: wl2})
	if err != nil || r2.GetReplayed() || r2.GetWorkload().GetId() == first.GetWorkload().GetId() {
		t.Fatalf("same key other queue: %v %v", r2, err)
	}

	// Cancel of a dispatched workload records CancelRequested (the loop
	// does the rest). Dispatch it the way the loop would: CAS in etcd.
	id := first.GetWorkload().GetId()
	key, _ := WorkloadKey(id)
	w, rev, err := e.svc.getWorkload(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	w.Status.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED
	w.Status.Cluster = "east"
	b, _ := marshal(w)
	if _, err := e.st.Commit(ctx, nil, store.PutIfModRev(key, b, rev)); err != nil {
		t.Fatal(err)
	}
	c, err := e.wl.CancelWorkload(ctx, &meridianv1.CancelWorkloadRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	if c.GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED || !hasCondition(c.GetStatus(), ConditionCancelRequested) {
		t.Fatalf("cancel of dispatched: %v", c.GetStatus())
	}
	c2, err := e.wl.CancelWorkload(ctx, &meridianv1.CancelWorkloadRequest{Id: id})
	if err != nil || len(c2.GetStatus().GetConditions()) != 1 {
		t.Fatalf("second cancel added a condition: %v %v", c2.GetStatus(), err)
	}

	// Cluster filter.
	lr, err := e.wl.ListWorkloads(ctx, &meridianv1.ListWorkloadsRequest{Queue: tn, Cluster: "east"})
	if err != nil || len(lr.GetWorkloads()) != 1 || lr.GetWorkloads()[0].GetId() != id {
		t.Fatalf("cluster filter: %v %v", lr, err)
	}
	// Label selector.
	lr, err = e.wl.ListWorkloads(ctx, &meridianv1.ListWorkloadsRequest{Queue: tn, LabelSelector: "team!=vision"})
	if err != nil || len(lr.GetWorkloads()) != 0 {
		t.Fatalf("label selector team!=vision: %v %v", lr, err)
	}
	lr, err = e.wl.ListWorkloads(ctx, &meridianv1.ListWorkloadsRequest{Queue: tn, LabelSelector: "team=vision"})
	if err != nil || len(lr.GetWorkloads()) != 2 {
		t.Fatalf("label selector team=vision: %d %v", len(lr.GetWorkloads()), err)
	}
	// Unknown id.
	_, err = e.wl.GetWorkload(ctx, &meridianv1.GetWorkloadRequest{Id: "wl-00000000000000000000000000"})
	wantCode(t, err, codes.NotFound)
}

func TestQueueLifecycle(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	tn := tenant(t)
	e.mkQueues(t, tn, tn+"/a", tn+"/b")

	// A queue with children is not a leaf: no submits, no delete.
	_, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: validWorkload(tn)})
	wantCode(t, err, codes.InvalidArgument)
	if !slices.Contains(fields(err), "queue") {
		t.Fatalf("fields %v", fields(err))
	}
	_, err = e.qs.DeleteQueue(ctx, &meridianv1.DeleteQueueRequest{Path: tn})
	wantCode(t, err, codes.FailedPrecondition)

	// Duplicate create.
	_, err = e.qs.CreateQueue(ctx, &meridianv1.CreateQueueRequest{Queue: &meridianv1.Queue{Path: tn + "/a"}})
	wantCode(t, err, codes.AlreadyExists)
	// Missing parent.
	_, err = e.qs.CreateQueue(ctx, &meridianv1.CreateQueueRequest{Queue: &meridianv1.Queue{Path: tn + "/zz/x"}})
	wantCode(t, err, codes.InvalidArgument)

	// Update with a mask and an optimistic revision.
	q, err := e.qs.GetQueue(ctx, &meridianv1.GetQueueRequest{Path: tn + "/a"})
	if err != nil {
		t.Fatal(err)
	}
	up, err := e.qs.UpdateQueue(ctx, &meridianv1.UpdateQueueRequest{Queue: &meridianv1.Queue{Path: tn + "/a", Weight: 9, Description: "ignored", Revision: q.GetRevision()},
		UpdateMask: maskOf("weight")})
	if err != nil {
		t.Fatal(err)
	}
	if up.GetWeight() != 9 || up.GetDescription() != "" || len(up.GetQuotas()) != 1 || up.GetRevision() <= q.GetRevision() {
		t.Fatalf("update = %v", up)
	}
	_, err = e.qs.UpdateQueue(ctx, &meridianv1.UpdateQueueRequest{Queue: &meridianv1.Queue{Path: tn + "/a", Weight: 3, Revision: q.GetRevision()}})
	wantCode(t, err, codes.FailedPrecondition)

	// Delete refused while a workload is queued, naming it; allowed after cancel.
	sub, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: validWorkload(tn + "/a")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.qs.DeleteQueue(ctx, &meridianv1.DeleteQueueRequest{Path: tn + "/a"})
	wantCode(t, err, codes.FailedPrecondition)
	if !strings.Contains(err.Error(), sub.GetWorkload().GetId()) {
		t.Fatalf("delete refusal does not name the workload: %v", err)
	}
	if _, err := e.wl.CancelWorkload(ctx, &meridianv1.CancelWorkloadRequest{Id: sub.GetWorkload().GetId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.qs.DeleteQueue(ctx, &meridianv1.DeleteQueueRequest{Path: tn + "/a"}); err != nil {
		t.Fatal(err)
	}
	_, err = e.qs.GetQueue(ctx, &meridianv1.GetQueueRequest{Path: tn + "/a"})
	wantCode(t, err, codes.NotFound)

	// List by prefix, paged one at a time: tn, tn/b.
	var paths []string
	tok := ""
	for i := 0; i < 5; i++ {
		lr, err := e.qs.ListQueues(ctx, &meridianv1.ListQueuesRequest{Prefix: tn, PageSize: 1, PageToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range lr.GetQueues() {
			paths = append(paths, q.GetPath())
		}
		if tok = lr.GetNextPageToken(); tok == "" {
			break
		}
	}
	if !slices.Equal(paths, []string{tn, tn + "/b"}) {
		t.Fatalf("listed %v", paths)
	}
}

func maskOf(paths ...string) *fieldmaskpb.FieldMask { return &fieldmaskpb.FieldMask{Paths: paths} }

// TestConcurrentIdempotentSubmits: many clients racing with one key create
// exactly one workload; every other answer is a replay of it.
func TestConcurrentIdempotentSubmits(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	tn := tenant(t)
	e.mkQueues(t, tn)
	w := validWorkload(tn)
	w.IdempotencyKey = "race-1"
	const n = 12
	type res struct {
		id       string
		replayed bool
		err      error
	}
	out := make(chan res, n)
	for i := 0; i < n; i++ {
		go func() {
			r, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: w})
			out <- res{r.GetWorkload().GetId(), r.GetReplayed(), err}
		}()
	}
	ids := map[string]bool{}
	created := 0
	for i := 0; i < n; i++ {
		r := <-out
		if r.err != nil {
			t.Fatal(r.err)
		}
		ids[r.id] = true
		if !r.replayed {
			created++
		}
	}
	if len(ids) != 1 || created != 1 {
		t.Fatalf("%d ids, %d created; want 1 and 1", len(ids), created)
	}
	lr, err := e.wl.ListWorkloads(ctx, &meridianv1.ListWorkloadsRequest{Queue: tn})
	if err != nil || len(lr.GetWorkloads()) != 1 {
		t.Fatalf("stored %d workloads (%v)", len(lr.GetWorkloads()), err)
	}
}
