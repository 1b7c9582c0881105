package api

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-gpu/meridian/hub/records"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

const basicView = meridianv1.WorkloadView_WORKLOAD_VIEW_BASIC

// wantBasicOfStored checks that got is the basic view of the workload the
// hub stored under got's id, and that the stored one is whole.
func (e *env) wantBasicOfStored(t *testing.T, got *meridianv1.Workload) {
	t.Helper()
	stored, err := e.wl.GetWorkload(testCtx(t), &meridianv1.GetWorkloadRequest{Id: got.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if len(stored.GetPodSets()) == 0 || stored.GetRuntime() == nil {
		t.Fatalf("stored workload lost its spec: %v", stored)
	}
	if len(got.GetPodSets()) != 0 || got.GetRuntime() != nil {
		t.Fatalf("basic answer carries the spec: %v", got)
	}
	if !proto.Equal(got, records.BasicOf(stored)) {
		t.Fatalf("basic answer\n%v\nis not the basic view of the stored\n%v", got, stored)
	}
	if got.GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED || got.GetCreateTime() == nil {
		t.Fatalf("basic answer lacks where it stands: %v", got)
	}
}

// A submit that asks for the basic view gets the stored workload's basic
// view, a replay included; the workload is stored whole, and the full
// view is the default.
func TestSubmitAnswersInTheViewAskedFor(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	q := tenant(t) + "/views"
	e.mkQueues(t, strings.Split(q, "/")[0], q)

	one := validWorkload(q)
	one.IdempotencyKey = "one"
	r, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: one, View: basicView})
	if err != nil {
		t.Fatal(err)
	}
	e.wantBasicOfStored(t, r.GetWorkload())
	again, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: one, View: basicView})
	if err != nil {
		t.Fatal(err)
	}
	if !again.GetReplayed() || again.GetWorkload().GetId() != r.GetWorkload().GetId() {
		t.Fatalf("replay = %v, want %s replayed", again, r.GetWorkload().GetId())
	}
	e.wantBasicOfStored(t, again.GetWorkload())

	ws := batchOf(5, q, "arr")
	br, err := e.wl.SubmitWorkloads(ctx, &meridianv1.SubmitWorkloadsRequest{Workloads: ws, View: basicView})
	if err != nil {
		t.Fatal(err)
	}
	for i, res := range br.GetResults() {
		if res.GetWorkload().GetName() != ws[i].GetName() {
			t.Fatalf("result %d is %q, want %q", i, res.GetWorkload().GetName(), ws[i].GetName())
		}
		e.wantBasicOfStored(t, res.GetWorkload())
	}
	// Replayed and new in one array: each answer basic, the flags kept.
	ws = append(ws, batchOf(6, q, "arr")[5])
	br, err = e.wl.SubmitWorkloads(ctx, &meridianv1.SubmitWorkloadsRequest{Workloads: ws, View: basicView})
	if err != nil {
		t.Fatal(err)
	}
	for i, res := range br.GetResults() {
		if res.GetReplayed() != (i < 5) {
			t.Fatalf("result %d replayed=%v", i, res.GetReplayed())
		}
		e.wantBasicOfStored(t, res.GetWorkload())
	}

	full, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: validWorkload(q)})
	if err != nil {
		t.Fatal(err)
	}
	if len(full.GetWorkload().GetPodSets()) == 0 || full.GetWorkload().GetRuntime() == nil {
		t.Fatalf("the default answer is not the whole workload: %v", full.GetWorkload())
	}
}

// An unknown view is refused before anything is stored, naming the field.
func TestSubmitRefusesAnUnknownView(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	q := tenant(t) + "/badview"
	e.mkQueues(t, strings.Split(q, "/")[0], q)
	before := e.workloadKeys(t)
	_, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: validWorkload(q), View: 7})
	wantCode(t, err, codes.InvalidArgument)
	if !slices.Contains(fields(err), "view") {
		t.Fatalf("fields %v, want view", fields(err))
	}
	_, err = e.wl.SubmitWorkloads(ctx, &meridianv1.SubmitWorkloadsRequest{Workloads: batchOf(2, q, ""), View: -1})
	wantCode(t, err, codes.InvalidArgument)
	if !slices.Contains(fields(err), "view") {
		t.Fatalf("fields %v, want view", fields(err))
	}
	if n := e.workloadKeys(t) - before; n != 0 {
		t.Fatalf("%d workloads stored by refused submits", n)
	}
}

// Over REST the single submit takes the view as a query parameter, by
// name or number, and the array submit in its body.
func TestSubmitViewOverREST(t *testing.T) {
	e := newEnv(t)
	q := tenant(t) + "/restview"
	e.mkQueues(t, strings.Split(q, "/")[0], q)
	body := mustJSON(t, validWorkload(q))
	for _, v := range []string{"WORKLOAD_VIEW_BASIC", "1"} {
		var got meridianv1.SubmitWorkloadResponse
		e.rest(t, http.MethodPost, "/v1/workloads?view="+v, body, nil).decode(t, &got)
		e.wantBasicOfStored(t, got.GetWorkload())
	}
	bad := e.rest(t, http.MethodPost, "/v1/workloads?view=SMALL", body, nil)
	if bad.code != http.StatusBadRequest || !strings.Contains(string(bad.body), "view") {
		t.Fatalf("?view=SMALL: HTTP %d %s", bad.code, bad.body)
	}
	var arr meridianv1.SubmitWorkloadsResponse
	e.rest(t, http.MethodPost, "/v1/workloads:batchSubmit",
		mustJSON(t, &meridianv1.SubmitWorkloadsRequest{Workloads: batchOf(2, q, ""), View: basicView}), nil).decode(t, &arr)
	if len(arr.GetResults()) != 2 {
		t.Fatalf("%d results", len(arr.GetResults()))
	}
	for _, res := range arr.GetResults() {
		e.wantBasicOfStored(t, res.GetWorkload())
	}
}
