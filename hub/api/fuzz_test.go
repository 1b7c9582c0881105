package api

import (
	"net/http"
	"testing"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// FuzzSubmitJSON posts arbitrary bytes to POST /v1/workloads on a real
// hub API over embedded etcd. The handler must never panic or answer 5xx,
// a refused body must store nothing, and an accepted one must come back
// as a QUEUED workload.
func FuzzSubmitJSON(f *testing.F) {
	e := newEnv(f)
	tn := tenant(f)
	q := tn + "/q"
	e.mkQueues(f, tn, q)
	f.Add(mustJSON(f, validWorkload(q)))
	f.Add([]byte(`{"queue":"` + q + `","podSets":[{"name":"a","replicas":1,"resources":{"gpuMilli":500,"fractionalMode":"FRACTIONAL_MODE_MIG"}}]}`))
	f.Add([]byte(`{"queue":"` + q + `","podSets":[{"name":"a","replicas":1,"resources":{"gpuMilli":1500}}]}`))
	f.Add([]byte("queue: " + q + "\npod_sets:\n  - name: a\n    replicas: 2\n"))
	f.Add([]byte(`{"queue":"` + q + `","podSets":[{"name":"a","replicas":1}],"idempotencyKey":"k1"}`))
	f.Add([]byte(`{"queue":"nope","podSets":[]}`))
	f.Add([]byte(`{"runtime":{"extra":{"a":[1,{"b":null}]}}}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"queue":1e999}`))
	f.Add([]byte("\xff\xfe"))
	f.Fuzz(func(t *testing.T, body []byte) {
		before := e.keyCount(t)
		r := e.rest(t, "POST", "/v1/workloads", body, nil)
		switch {
		case r.code >= 500:
			t.Fatalf("HTTP %d for %q: %s", r.code, body, r.body)
		case r.code == http.StatusOK:
			var resp meridianv1.SubmitWorkloadResponse
			r.decode(t, &resp)
			if resp.GetWorkload().GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED && !resp.GetReplayed() {
				t.Fatalf("accepted workload not QUEUED: %v", resp.GetWorkload().GetStatus())
			}
		default:
			_ = r.status(t) // the error body is a status
			if after := e.keyCount(t); after != before {
				t.Fatalf("refused body (HTTP %d) stored %d keys: %q", r.code, after-before, body)
			}
		}
	})
}

// FuzzSubmitBatchJSON does the same for POST /v1/workloads:batchSubmit: a
// refused batch stores nothing, an accepted one stores every workload it
// returns as created.
func FuzzSubmitBatchJSON(f *testing.F) {
	e := newEnv(f)
	tn := tenant(f)
	q := tn + "/q"
	e.mkQueues(f, tn, q)
	f.Add(mustJSON(f, &meridianv1.SubmitWorkloadsRequest{Workloads: batchOf(3, q, "k")}))
	f.Add(mustJSON(f, &meridianv1.SubmitWorkloadsRequest{Workloads: batchOf(2, q, "")}))
	f.Add([]byte(`{"workloads":[{"queue":"` + q + `","podSets":[{"name":"a","replicas":1}]},{"queue":"other"}]}`))
	f.Add([]byte(`{"workloads":[{"queue":"` + q + `","idempotencyKey":"x"},{"queue":"` + q + `","idempotencyKey":"x"}]}`))
	f.Add([]byte(`{"workloads":[]}`))
	f.Add([]byte(`{"workloads":{}}`))
	f.Add([]byte(`{"rejectIfNeverFits":"yes"}`))
	f.Add([]byte("\xff\xfe"))
	f.Fuzz(func(t *testing.T, body []byte) {
		before := e.keyCount(t)
		r := e.rest(t, "POST", "/v1/workloads:batchSubmit", body, nil)
		switch {
		case r.code >= 500:
			t.Fatalf("HTTP %d for %q: %s", r.code, body, r.body)
		case r.code == http.StatusOK:
			var resp meridianv1.SubmitWorkloadsResponse
			r.decode(t, &resp)
			created := 0
			for _, res := range resp.GetResults() {
				if !res.GetReplayed() {
					created++
					if res.GetWorkload().GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED {
						t.Fatalf("accepted workload not QUEUED: %v", res.GetWorkload().GetStatus())
					}
				}
			}
			if created == 0 && len(resp.GetResults()) == 0 {
				t.Fatalf("accepted an empty batch: %q", body)
			}
		default:
			_ = r.status(t)
			if after := e.keyCount(t); after != before {
				t.Fatalf("refused batch (HTTP %d) stored %d keys: %q", r.code, after-before, body)
			}
		}
	})
}
