package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meridian-gpu/meridian/hub/api/validation"
	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

func batchOf(n int, queue, keyPrefix string) []*meridianv1.Workload {
	ws := make([]*meridianv1.Workload, n)
	for i := range ws {
		ws[i] = validWorkload(queue)
		ws[i].Name = fmt.Sprintf("sweep-%d", i)
		if keyPrefix != "" {
			ws[i].IdempotencyKey = fmt.Sprintf("%s-%d", keyPrefix, i)
		}
	}
	return ws
}

// workloadKeys counts the stored workloads.
func (e *env) workloadKeys(t *testing.T) int {
	t.Helper()
	items, _, err := e.st.List(testCtx(t), store.Prefix(store.KindWorkloads), 0)
	if err != nil {
		t.Fatal(err)
	}
	return len(items)
}

// A batch is stored whole, in request order, each workload as a single
// submit would store it; a repeated batch with the same idempotency keys
// returns the stored workloads.
func TestSubmitWorkloadsStoresTheWholeBatch(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	q := tenant(t) + "/sweep"
	e.mkQueues(t, strings.Split(q, "/")[0], q)
	before := e.workloadKeys(t)
	ws := batchOf(200, q, "k")
	resp, err := e.wl.SubmitWorkloads(ctx, &meridianv1.SubmitWorkloadsRequest{Workloads: ws})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetResults()) != len(ws) {
		t.Fatalf("%d results for %d workloads", len(resp.GetResults()), len(ws))
	}
	ids := map[string]bool{}
	for i, r := range resp.GetResults() {
		w := r.GetWorkload()
		if r.GetReplayed() || w.GetId() == "" || w.GetName() != ws[i].GetName() || w.GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED {
			t.Fatalf("result %d = %v", i, r)
		}
		ids[w.GetId()] = true
		got, err := e.wl.GetWorkload(ctx, &meridianv1.GetWorkloadRequest{Id: w.GetId()})
		if err != nil || got.GetName() != ws[i].GetName() {
			t.Fatalf("stored %s: %v, %v", w.GetId(), got, err)
		}
	}
	if len(ids) != len(ws) {
		t.Fatalf("%d distinct ids for %d workloads", len(ids), len(ws))
	}
	if n := e.workloadKeys(t) - before; n != len(ws) {
		t.Fatalf("%d workloads stored, want %d", n, len(ws))
	}

	// The same batch again, plus one new workload: the 200 replay, the
	// new one is created.
	again := append(batchOf(200, q, "k"), batchOf(201, q, "k")[200])
	resp2, err := e.wl.SubmitWorkloads(ctx, &meridianv1.SubmitWorkloadsRequest{Workloads: again})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range resp2.GetResults()[:200] {
		if !r.GetReplayed() || r.GetWorkload().GetId() != resp.GetResults()[i].GetWorkload().GetId() {
			t.Fatalf("repeat %d: replayed=%v id %s, want the stored %s", i, r.GetReplayed(), r.GetWorkload().GetId(), resp.GetResults()[i].GetWorkload().GetId())
		}
	}
	if last := resp2.GetResults()[200]; last.GetReplayed() || ids[last.GetWorkload().GetId()] {
		t.Fatalf("the new workload came back as %v", last)
	}
	if n := e.workloadKeys(t) - before; n != len(ws)+1 {
		t.Fatalf("%d workloads stored after the repeat, want %d", n, len(ws)+1)
	}
}

// A batch with any problem stores nothing, and the error names every
// problem as workloads[i].<field>.
func TestSubmitWorkloadsRefusesWhole(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	tn := tenant(t)
	q, other := tn+"/a", tn+"/b"
	e.mkQueues(t, tn, q, other)
	if _, err := e.wl.SubmitWorkloads(ctx, &meridianv1.SubmitWorkloadsRequest{Workloads: batchOf(3, q, "used")}); err != nil {
		t.Fatal(err)
	}
	before := e.workloadKeys(t)

	badSpec := batchOf(4, q, "")
	badSpec[1].PodSets[0].Replicas = -1
	badSpec[3].Priority = 1 << 30
	mixed := batchOf(3, q, "")
	mixed[2].Queue = other
	dupKeys := batchOf(3, q, "dup")
	dupKeys[2].IdempotencyKey = dupKeys[0].IdempotencyKey
	changed := batchOf(3, q, "used") // keys used above, one body differs
	changed[1].Labels = map[string]string{"team": "other"}
	tooMany := batchOf(MaxBatchSubmit+1, q, "")
	noQueue := batchOf(2, tn+"/missing", "")
	parent := batchOf(2, tn, "")

	for name, tc := range map[string]struct {
		ws     []*meridianv1.Workload
		code   codes.Code
		fields []string
	}{
		"empty":                {nil, codes.InvalidArgument, []string{"workloads"}},
		"too many":             {tooMany, codes.InvalidArgument, []string{"workloads"}},
		"invalid workloads":    {badSpec, codes.InvalidArgument, []string{"workloads[1].pod_sets[0].replicas", "workloads[3].priority"}},
		"two queues":           {mixed, codes.InvalidArgument, []string{"workloads[2].queue"}},
		"a key twice":          {dupKeys, codes.InvalidArgument, []string{"workloads[2].idempotency_key"}},
		"a used key, new body": {changed, codes.AlreadyExists, []string{"workloads[1].idempotency_key"}},
		"queue does not exist": {noQueue, codes.InvalidArgument, []string{"workloads[0].queue"}},
		"queue is not a leaf":  {parent, codes.InvalidArgument, []string{"workloads[0].queue"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := e.wl.SubmitWorkloads(ctx, &meridianv1.SubmitWorkloadsRequest{Workloads: tc.ws})
			if status.Code(err) != tc.code {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.code)
			}
			got := map[string]bool{}
			for _, v := range validation.FieldViolations(err) {
				got[v.GetField()] = true
			}
			for _, f := range tc.fields {
				if !got[f] {
					t.Errorf("no violation for %s in %v", f, err)
				}
			}
			if n := e.workloadKeys(t); n != before {
				t.Fatalf("%d workloads stored by a refused batch", n-before)
			}
		})
	}

	md := metadata.Pairs(strings.ToLower(IdempotencyHeader), "one-key")
	_, err := e.wl.SubmitWorkloads(metadata.NewOutgoingContext(ctx, md), &meridianv1.SubmitWorkloadsRequest{Workloads: batchOf(2, q, "")})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), IdempotencyHeader) {
		t.Fatalf("batch with an idempotency header: %v, want InvalidArgument naming the header", err)
	}
}

// A batch larger than one etcd transaction allows is refused with the
// number that fits, and nothing is stored.
func TestSubmitWorkloadsSaysHowManyFit(t *testing.T) {
	e := newEnv(t)
	e.svc.submits.maxOps = 21 // what a small external etcd might allow
	ctx := testCtx(t)
	q := tenant(t) + "/small"
	e.mkQueues(t, strings.Split(q, "/")[0], q)
	before := e.workloadKeys(t)
	_, err := e.wl.SubmitWorkloads(ctx, &meridianv1.SubmitWorkloadsRequest{Workloads: batchOf(11, q, "k")})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "send at most 10 per call") {
		t.Fatalf("err = %v, want InvalidArgument saying 10 fit", err)
	}
	if n := e.workloadKeys(t); n != before {
		t.Fatalf("%d stored", n-before)
	}
	if _, err := e.wl.SubmitWorkloads(ctx, &meridianv1.SubmitWorkloadsRequest{Workloads: batchOf(10, q, "k")}); err != nil {
		t.Fatalf("10 workloads with keys in 21 ops: %v", err)
	}
}

// POST /v1/workloads:batchSubmit takes the request as JSON and answers
// with one result per workload.
func TestSubmitWorkloadsREST(t *testing.T) {
	e := newEnv(t)
	q := tenant(t) + "/rest"
	e.mkQueues(t, strings.Split(q, "/")[0], q)
	body, err := protojson.Marshal(&meridianv1.SubmitWorkloadsRequest{Workloads: batchOf(3, q, "")})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(e.base+"/v1/workloads:batchSubmit", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var out struct {
		Results []struct {
			Workload struct {
				ID   string `json:"id"`
				Name string `json:"name"`
			} `json:"workload"`
		} `json:"results"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Results) != 3 || out.Results[2].Workload.ID == "" || out.Results[2].Workload.Name != "sweep-2" {
		t.Fatalf("response %s", b)
	}
	bad, _ := protojson.Marshal(&meridianv1.SubmitWorkloadsRequest{Workloads: append(batchOf(1, q, ""), &meridianv1.Workload{Queue: q})})
	resp2, err := http.Post(e.base+"/v1/workloads:batchSubmit", "application/json", bytes.NewReader(bad))
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	b2, _ := io.ReadAll(resp2.Body)
	if resp2.StatusCode != http.StatusBadRequest || !strings.Contains(string(b2), "workloads[1].") {
		t.Fatalf("invalid batch: status %d: %s", resp2.StatusCode, b2)
	}
}
