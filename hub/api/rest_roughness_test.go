package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/meridian-gpu/meridian/hub/api/validation"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// restHeaders sends one request and returns the response headers too.
func (e *env) restHeaders(t *testing.T, method, path string, body []byte, hdr map[string]string) (restResp, http.Header) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = strings.NewReader(string(body))
	}
	req, err := http.NewRequestWithContext(ctx, method, e.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return restResp{code: resp.StatusCode, body: b}, resp.Header
}

// wantViolation checks a 400 whose BadRequest names field and whose
// message contains each of words.
func wantViolation(t *testing.T, r restResp, field string, words ...string) {
	t.Helper()
	if r.code != http.StatusBadRequest {
		t.Fatalf("HTTP %d, want 400: %s", r.code, r.body)
	}
	st := r.status(t)
	vs := validation.FieldViolations(st.Err())
	var names []string
	for _, v := range vs {
		names = append(names, v.GetField())
		if v.GetField() == field {
			for _, w := range words {
				if !strings.Contains(v.GetDescription(), w) {
					t.Errorf("violation on %s = %q, want it to contain %q", field, v.GetDescription(), w)
				}
			}
		}
	}
	if !slices.Contains(names, field) {
		t.Fatalf("violations name %v, want %q: %s", names, field, r.body)
	}
	for _, leak := range []string{"strconv", "proto:", "ParseInt"} {
		if strings.Contains(string(r.body), leak) {
			t.Errorf("error leaks %q: %s", leak, r.body)
		}
	}
}

func TestRESTQueryParameters(t *testing.T) {
	e := newEnv(t)
	tn := tenant(t)
	e.mkQueues(t, tn)
	sub := e.rest(t, "POST", "/v1/workloads", mustJSON(t, validWorkload(tn)), nil)
	var resp meridianv1.SubmitWorkloadResponse
	sub.decode(t, &resp)

	// Short and full enum names both filter.
	for _, q := range []string{"phase=QUEUED", "phase=WORKLOAD_PHASE_QUEUED", "phase=queued"} {
		var lr meridianv1.ListWorkloadsResponse
		e.rest(t, "GET", "/v1/workloads?queue="+tn+"&"+q, nil, nil).decode(t, &lr)
		if len(lr.GetWorkloads()) != 1 {
			t.Errorf("?%s listed %d workloads, want 1", q, len(lr.GetWorkloads()))
		}
	}
	var lr meridianv1.ListWorkloadsResponse
	e.rest(t, "GET", "/v1/workloads?queue="+tn+"&phase=RUNNING", nil, nil).decode(t, &lr)
	if len(lr.GetWorkloads()) != 0 {
		t.Errorf("?phase=RUNNING listed %d workloads, want 0", len(lr.GetWorkloads()))
	}

	wantViolation(t, e.rest(t, "GET", "/v1/workloads?phase=QUEUD", nil, nil), "phase", "QUEUED", "RUNNING", "WORKLOAD_PHASE_")
	wantViolation(t, e.rest(t, "GET", "/v1/workloads?pageSize=abc", nil, nil), "page_size", "pageSize", "whole number")
	wantViolation(t, e.rest(t, "GET", "/v1/queues?page_size=1.5", nil, nil), "page_size", "whole number")
	wantViolation(t, e.rest(t, "GET", "/v1/workloads?phse=QUEUED", nil, nil), "phse", "unknown query parameter", "phase")
	wantViolation(t, e.rest(t, "GET", "/v1/workloads:watch?sendInitial=maybe", nil, nil), "send_initial", "true or false")
	wantViolation(t, e.rest(t, "GET", "/v1/workloads/"+resp.GetWorkload().GetId()+"?id=wl-other", nil, nil), "id", "URL path")
	wantViolation(t, e.rest(t, "GET", "/v1/workloads?queue=a&queue=b", nil, nil), "queue", "2 times")
	wantViolation(t, e.rest(t, "POST", "/v1/workloads/"+resp.GetWorkload().GetId()+":cancel?force=true", []byte(`{}`), nil), "force", "body")
}

func TestRESTUnknownBodyFieldsAreNamed(t *testing.T) {
	e := newEnv(t)
	tn := tenant(t)
	e.mkQueues(t, tn)
	wantViolation(t, e.rest(t, "POST", "/v1/workloads/wl-01JD3M6Q7ZK4X9V2B8N5T0RCWE:cancel", []byte(`{"reasn": "typo"}`), nil), "reasn", "unknown field", "reason")
	wantViolation(t, e.rest(t, "POST", "/v1/queues", []byte(`{"path": "`+tn+`/x", "quotas": [{"acceleratorClas": "a"}]}`), nil), "quotas[0].acceleratorClas", "unknown field", "acceleratorClass")
	wantViolation(t, e.rest(t, "PATCH", "/v1/queues/"+tn, []byte(`{"wieght": 3}`), nil), "wieght", "unknown field")
	wantViolation(t, e.rest(t, "POST", "/v1/queues", []byte(`{"path": "`+tn+`/y", "weight": "heavy"}`), nil), "weight")
	if e.keyCount(t) == 0 {
		t.Fatal("no keys at all")
	}
	if r := e.rest(t, "GET", "/v1/queues/"+tn+"/x", nil, nil); r.code != http.StatusNotFound {
		t.Fatalf("queue with an unknown field was created: HTTP %d", r.code)
	}
}

func TestRESTWrongMethodIs405WithAllow(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ method, path, allow string }{
		{"DELETE", "/v1/workloads/wl-01JD3M6Q7ZK4X9V2B8N5T0RCWE", "GET"},
		{"DELETE", "/v1/workloads", "GET, POST"},
		{"PUT", "/v1/queues/acme/vision", "DELETE, GET, PATCH"},
		{"PUT", "/v1/clusters/eu-1:drain", "GET, POST"}, // GET reaches GetCluster with id "eu-1:drain"
	} {
		r, h := e.restHeaders(t, c.method, c.path, nil, nil)
		if r.code != http.StatusMethodNotAllowed || h.Get("Allow") != c.allow {
			t.Errorf("%s %s: HTTP %d Allow %q, want 405 Allow %q (%s)", c.method, c.path, r.code, h.Get("Allow"), c.allow, r.body)
		}
	}
	if r := e.rest(t, "GET", "/v1/nothing-here", nil, nil); r.code != http.StatusNotFound {
		t.Errorf("unknown path: HTTP %d, want 404", r.code)
	}
}

func TestRESTDoesNotLeakGRPCMetadata(t *testing.T) {
	e := newEnv(t)
	tn := tenant(t)
	e.mkQueues(t, tn)
	for _, p := range []string{"/v1/queues", "/v1/queues/" + tn, "/v1/admin/health"} {
		r, h := e.restHeaders(t, "GET", p, nil, nil)
		if r.code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", p, r.code, r.body)
		}
		for k := range h {
			if strings.HasPrefix(strings.ToLower(k), "grpc-metadata-") {
				t.Errorf("GET %s leaks header %s", p, k)
			}
		}
	}
}

func TestRESTQueuePatch(t *testing.T) {
	e := newEnv(t)
	tn := tenant(t)
	e.mkQueues(t, tn, tn+"/a")
	path := "/v1/queues/" + tn + "/a"

	// A body path different from the URL's is an error, not ignored.
	wantViolation(t, e.rest(t, "PATCH", path, []byte(`{"path": "`+tn+`/b", "weight": 3}`), nil), "queue.path", tn+"/b")
	// The same path is fine.
	var q meridianv1.Queue
	e.rest(t, "PATCH", path, []byte(`{"path": "`+tn+`/a", "weight": 3}`), nil).decode(t, &q)
	if q.GetWeight() != 3 {
		t.Fatalf("weight = %d, want 3", q.GetWeight())
	}

	// What a generated client sends for a weight-only update: nulls and
	// zero timestamps. Quotas and description survive.
	e.rest(t, "PATCH", path, []byte(`{"description": "keep me"}`), nil).decode(t, &q)
	body := `{"weight": 7, "quotas": null, "description": null, "status": null, "createTime": "0001-01-01T00:00:00Z", "updateTime": "0001-01-01T00:00:00.000Z", "revision": null}`
	e.rest(t, "PATCH", path, []byte(body), nil).decode(t, &q)
	if q.GetWeight() != 7 || len(q.GetQuotas()) != 1 || q.GetDescription() != "keep me" {
		t.Fatalf("after a weight-only PATCH with nulls: %v", &q)
	}
	// Nothing but nulls changes nothing.
	before := q.GetRevision()
	e.rest(t, "PATCH", path, []byte(`{"quotas": null}`), nil).decode(t, &q)
	if len(q.GetQuotas()) != 1 || q.GetWeight() != 7 || q.GetRevision() != before {
		t.Fatalf("an all-null PATCH changed the queue: %v", &q)
	}
	// An explicit mask clears a null field.
	e.rest(t, "PATCH", path+"?update_mask=quotas", []byte(`{"quotas": null}`), nil).decode(t, &q)
	if len(q.GetQuotas()) != 0 || q.GetWeight() != 7 {
		t.Fatalf("PATCH ?update_mask=quotas with null quotas: %v", &q)
	}
	wantViolation(t, e.rest(t, "PATCH", path+"?updateMask=path,bogus", []byte(`{}`), nil), "update_mask.paths[1]", "bogus")
}

func TestWatchFutureRevisionFails(t *testing.T) {
	e := newEnv(t)
	r := e.rest(t, "GET", "/v1/workloads:watch?sinceRevision=999999999999", nil, nil)
	if r.code != http.StatusBadRequest || !strings.Contains(string(r.body), "since_revision") || !strings.Contains(string(r.body), "store is at revision") {
		t.Fatalf("watch from the future: HTTP %d %s", r.code, r.body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := e.wl.WatchWorkloads(ctx, &meridianv1.WatchWorkloadsRequest{SinceRevision: 999999999999})
	if err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	wantCode(t, err, codes.OutOfRange)
	if !slices.Contains(fields(err), "since_revision") {
		t.Fatalf("fields %v", fields(err))
	}
}

// Creating a child queue rewrites the parent (so racing submits look
// again) but must not change the revision and ETag clients compare.
func TestQueueETagAndIfMatch(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	tn := tenant(t)
	e.mkQueues(t, tn)
	key, _ := QueueKey(tn)
	modRev := func() int64 {
		resp, err := e.cli.Get(ctx, key)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("read %s: %v", key, err)
		}
		return resp.Kvs[0].ModRevision
	}

	r, h := e.restHeaders(t, "GET", "/v1/queues/"+tn, nil, nil)
	var q meridianv1.Queue
	r.decode(t, &q)
	etag := h.Get("ETag")
	if etag != fmt.Sprintf("%q", fmt.Sprint(q.GetRevision())) {
		t.Fatalf("ETag %q does not carry revision %d", etag, q.GetRevision())
	}
	storeRev := modRev()

	e.mkQueues(t, tn+"/child")
	if modRev() == storeRev {
		t.Fatal("creating a child did not rewrite the parent: the submit fence is gone")
	}
	r, h = e.restHeaders(t, "GET", "/v1/queues/"+tn, nil, nil)
	var q2 meridianv1.Queue
	r.decode(t, &q2)
	if q2.GetRevision() != q.GetRevision() || h.Get("ETag") != etag {
		t.Fatalf("child create moved the parent's revision %d -> %d, ETag %s -> %s", q.GetRevision(), q2.GetRevision(), etag, h.Get("ETag"))
	}
	// A client holding the parent from before the child updates it without
	// a spurious conflict, by body revision and by If-Match.
	up, err := e.qs.UpdateQueue(ctx, &meridianv1.UpdateQueueRequest{Queue: &meridianv1.Queue{Path: tn, Weight: 4, Revision: q.GetRevision()}, UpdateMask: maskOf("weight")})
	if err != nil {
		t.Fatalf("update with the pre-child revision: %v", err)
	}
	if up.GetRevision() == q.GetRevision() {
		t.Fatal("a spec change kept the revision")
	}
	// Now the old ETag is stale: 412, nothing changed.
	r, _ = e.restHeaders(t, "PATCH", "/v1/queues/"+tn, []byte(`{"weight": 5}`), map[string]string{"If-Match": etag})
	if r.code != http.StatusPreconditionFailed || !strings.Contains(string(r.body), "If-Match") {
		t.Fatalf("stale If-Match: HTTP %d %s", r.code, r.body)
	}
	// The current ETag works and the response carries the new one.
	r, h = e.restHeaders(t, "PATCH", "/v1/queues/"+tn, []byte(`{"weight": 5}`), map[string]string{"If-Match": queueETag(up.GetRevision())})
	r.decode(t, &q2)
	if q2.GetWeight() != 5 || h.Get("ETag") != queueETag(q2.GetRevision()) {
		t.Fatalf("PATCH with the current If-Match: %v ETag %q", &q2, h.Get("ETag"))
	}
	// The body revision of an old read still conflicts after a real change.
	_, err = e.qs.UpdateQueue(ctx, &meridianv1.UpdateQueueRequest{Queue: &meridianv1.Queue{Path: tn, Weight: 6, Revision: q.GetRevision()}, UpdateMask: maskOf("weight")})
	wantCode(t, err, codes.FailedPrecondition)

	// DELETE honours If-Match too, over REST and as gRPC metadata.
	var child meridianv1.Queue
	r, h = e.restHeaders(t, "GET", "/v1/queues/"+tn+"/child", nil, nil)
	r.decode(t, &child)
	if r, _ := e.restHeaders(t, "DELETE", "/v1/queues/"+tn+"/child", nil, map[string]string{"If-Match": `"1"`}); r.code != http.StatusPreconditionFailed {
		t.Fatalf("DELETE with a wrong If-Match: HTTP %d %s", r.code, r.body)
	}
	_, err = e.qs.DeleteQueue(metadata.AppendToOutgoingContext(ctx, "if-match", `"1"`), &meridianv1.DeleteQueueRequest{Path: tn + "/child"})
	wantCode(t, err, codes.FailedPrecondition)
	if r, _ := e.restHeaders(t, "DELETE", "/v1/queues/"+tn+"/child", nil, map[string]string{"If-Match": h.Get("ETag")}); r.code != http.StatusOK {
		t.Fatalf("DELETE with the current If-Match: HTTP %d %s", r.code, r.body)
	}
	if _, err := e.cli.Get(ctx, key, clientv3.WithCountOnly()); err != nil {
		t.Fatal(err)
	}
}

// What a client generated from the OpenAPI document (go-swagger style)
// sends by default: zero timestamps for output-only date-times, empty
// strings left out, null for unset objects and lists.
func TestGeneratedClientStyleRequests(t *testing.T) {
	e := newEnv(t)
	tn := tenant(t)
	zero := `"0001-01-01T00:00:00.000Z"`
	var q meridianv1.Queue
	e.rest(t, "POST", "/v1/queues", []byte(`{"path": "`+tn+`", "weight": 2, "quotas": [{"acceleratorClass": "nvidia-h100-80gb", "nominalMilliGpus": "8000"}], "status": null, "createTime": `+zero+`, "updateTime": `+zero+`}`), nil).decode(t, &q)
	if q.GetCreateTime().AsTime().Year() < 2000 {
		t.Fatalf("create_time not set by the server: %v", q.GetCreateTime())
	}
	var sub meridianv1.SubmitWorkloadResponse
	e.rest(t, "POST", "/v1/workloads", []byte(`{"queue": "`+tn+`", "createTime": `+zero+`, "status": null, "clusterSelector": null, "labels": null,
		"podSets": [{"name": "main", "replicas": 1, "resources": {"gpuMilli": 1000, "acceleratorClass": "nvidia-h100-80gb"}}],
		"runtime": {"container": {"image": "example/train:1"}}}`), map[string]string{"Idempotency-Key": "gen-1"}).decode(t, &sub)
	if sub.GetWorkload().GetId() == "" || sub.GetWorkload().GetCreateTime().AsTime().Year() < 2000 {
		t.Fatalf("submit = %v", sub.GetWorkload())
	}
	var lr meridianv1.ListWorkloadsResponse
	e.rest(t, "GET", "/v1/workloads?queue="+tn+"&pageSize=10&phase=WORKLOAD_PHASE_QUEUED", nil, nil).decode(t, &lr)
	if len(lr.GetWorkloads()) != 1 {
		t.Fatalf("list = %d workloads", len(lr.GetWorkloads()))
	}
	e.rest(t, "PATCH", "/v1/queues/"+tn, []byte(`{"weight": 3, "quotas": null, "createTime": `+zero+`, "updateTime": `+zero+`}`), nil).decode(t, &q)
	if q.GetWeight() != 3 || len(q.GetQuotas()) != 1 {
		t.Fatalf("generated-client PATCH: %v", &q)
	}
}

// fakeSubmitter records the SubmitWorkloadRequest the REST handler builds.
type fakeSubmitter struct {
	meridianv1.WorkloadServiceClient
	got *meridianv1.SubmitWorkloadRequest
}

func (f *fakeSubmitter) SubmitWorkload(_ context.Context, req *meridianv1.SubmitWorkloadRequest, _ ...grpc.CallOption) (*meridianv1.SubmitWorkloadResponse, error) {
	f.got = req
	return &meridianv1.SubmitWorkloadResponse{Workload: req.GetWorkload()}, nil
}

// The submit route decodes its own body; its one query parameter must
// still reach the RPC.
func TestRESTSubmitPassesRejectIfNeverFits(t *testing.T) {
	mux := NewGatewayMux()
	fake := &fakeSubmitter{}
	if err := HandleSubmit(mux, fake, 0); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(mux)
	defer hs.Close()
	e := &env{base: hs.URL}
	for q, want := range map[string]bool{"": false, "?rejectIfNeverFits=true": true, "?reject_if_never_fits=false": false} {
		fake.got = nil
		r := e.rest(t, "POST", "/v1/workloads"+q, mustJSON(t, validWorkload("acme")), nil)
		if r.code != http.StatusOK || fake.got == nil || fake.got.GetRejectIfNeverFits() != want {
			t.Errorf("POST /v1/workloads%s: HTTP %d, request %v, want reject_if_never_fits=%v", q, r.code, fake.got, want)
		}
	}
	wantViolation(t, e.rest(t, "POST", "/v1/workloads?rejectIfNeverFits=maybe", mustJSON(t, validWorkload("acme")), nil), "reject_if_never_fits", "true or false")
}
