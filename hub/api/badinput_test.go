package api

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// TestBadInput sends invalid requests through the real API (REST for
// submit bodies, gRPC for the rest) and checks each one is refused with
// InvalidArgument naming the field, and that etcd holds exactly the same
// number of keys afterwards.
func TestBadInput(t *testing.T) {
	e := newEnv(t)
	tn := tenant(t)
	leaf := tn + "/team/proj"
	e.mkQueues(t, tn, tn+"/team", leaf)
	mut := func(f func(w *meridianv1.Workload)) []byte {
		w := validWorkload(leaf)
		f(w)
		return mustJSON(t, w)
	}
	res := func(w *meridianv1.Workload) *meridianv1.Resources { return w.PodSets[0].Resources }
	huge := strings.Repeat("x", 300<<10)

	type tc struct {
		name string
		// Exactly one of body (REST submit) or call (gRPC).
		body   []byte
		hdr    map[string]string
		call   func(ctx context.Context) error
		field  string
		status int // expected HTTP status for REST cases; 0 means 400
	}
	cases := []tc{
		{name: "empty body", body: []byte(""), field: "body"},
		{name: "not json", body: []byte("{not json"), field: "body"},
		{name: "json array", body: []byte(`[1,2]`), field: "body"},
		{name: "unknown field", body: []byte(`{"queue":"` + leaf + `","bogus":1}`), field: "bogus"},
		{name: "wrong type replicas", body: []byte(`{"queue":"` + leaf + `","podSets":[{"name":"a","replicas":"many"}]}`), field: "podSets[0].replicas"},
		{name: "bad enum topology", body: []byte(`{"queue":"` + leaf + `","podSets":[{"name":"a","replicas":1,"topology":"TOPOLOGY_GALAXY"}]}`), field: "podSets[0].topology"},
		{name: "int32 overflow replicas", body: []byte(`{"queue":"` + leaf + `","podSets":[{"name":"a","replicas":99999999999}]}`), field: "podSets[0].replicas"},
		{name: "oversized body", body: []byte(`{"name":"` + huge + `"}`), field: "body", status: http.StatusRequestEntityTooLarge},
		{name: "missing queue", body: mut(func(w *meridianv1.Workload) { w.Queue = "" }), field: "queue"},
		{name: "unknown queue", body: mut(func(w *meridianv1.Workload) { w.Queue = tn + "/team/nope" }), field: "queue"},
		{name: "non-leaf queue", body: mut(func(w *meridianv1.Workload) { w.Queue = tn + "/team" }), field: "queue"},
		{name: "queue with four segments", body: mut(func(w *meridianv1.Workload) { w.Queue = "a/b/c/d" }), field: "queue"},
		{name: "queue upper case", body: mut(func(w *meridianv1.Workload) { w.Queue = "Acme" }), field: "queue"},
		{name: "no pod sets", body: mut(func(w *meridianv1.Workload) { w.PodSets = nil }), field: "pod_sets"},
		{name: "pod set without name", body: mut(func(w *meridianv1.Workload) { w.PodSets[0].Name = "" }), field: "pod_sets[0].name"},
		{name: "duplicate pod set names", body: mut(func(w *meridianv1.Workload) {
			w.PodSets = append(w.PodSets, &meridianv1.PodSet{Name: "worker", Replicas: 1})
		}), field: "pod_sets[1].name"},
		{name: "zero replicas", body: mut(func(w *meridianv1.Workload) { w.PodSets[0].Replicas = 0 }), field: "pod_sets[0].replicas"},
		{name: "negative replicas", body: mut(func(w *meridianv1.Workload) { w.PodSets[0].Replicas = -3 }), field: "pod_sets[0].replicas"},
		{name: "huge replicas", body: mut(func(w *meridianv1.Workload) { w.PodSets[0].Replicas = 10_000_001 }), field: "pod_sets[0].replicas"},
		{name: "min replicas above replicas", body: mut(func(w *meridianv1.Workload) { w.PodSets[0].MinReplicas = 5 }), field: "pod_sets[0].min_replicas"},
		{name: "negative gpu milli", body: mut(func(w *meridianv1.Workload) { res(w).GpuMilli = -1 }), field: "pod_sets[0].resources.gpu_milli"},
		{name: "fractional over 1000", body: mut(func(w *meridianv1.Workload) { res(w).GpuMilli = 1500 }), field: "pod_sets[0].resources.gpu_milli"},
		{name: "more than 8 gpus", body: mut(func(w *meridianv1.Workload) { res(w).GpuMilli = 9000 }), field: "pod_sets[0].resources.gpu_milli"},
		{name: "fractional mode on whole gpu", body: mut(func(w *meridianv1.Workload) {
			res(w).FractionalMode = meridianv1.FractionalMode_FRACTIONAL_MODE_MIG
		}), field: "pod_sets[0].resources.fractional_mode"},
		{name: "negative cpu", body: mut(func(w *meridianv1.Workload) { res(w).CpuMilli = -5 }), field: "pod_sets[0].resources.cpu_milli"},
		{name: "huge gpu memory", body: mut(func(w *meridianv1.Workload) { res(w).GpuMemoryMib = 2_000_000 }), field: "pod_sets[0].resources.gpu_memory_mib"},
		{name: "bad accelerator class", body: mut(func(w *meridianv1.Workload) { res(w).AcceleratorClass = "NVIDIA H100!" }), field: "pod_sets[0].resources.accelerator_class"},
		{name: "priority too high", body: mut(func(w *meridianv1.Workload) { w.Priority = 2_000_000 }), field: "priority"},
		{name: "bad name", body: mut(func(w *meridianv1.Workload) { w.Name = "Not_A_Label" }), field: "name"},
		{name: "bad label key", body: mut(func(w *meridianv1.Workload) { w.Labels = map[string]string{"-bad": "x"} }), field: `labels["-bad"]`},
		{name: "long label value", body: mut(func(w *meridianv1.Workload) {
			w.Labels = map[string]string{"team": strings.Repeat("v", 64)}
		}), field: `labels["team"]`},
		{name: "server-set id", body: mut(func(w *meridianv1.Workload) { w.Id = "wl-mine" }), field: "id"},
		{name: "server-set status", body: mut(func(w *meridianv1.Workload) {
			w.Status = &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING}
		}), field: "status"},
		{name: "server-set create time", body: mut(func(w *meridianv1.Workload) { w.CreateTime = timestamppb.Now() }), field: "create_time"},
		{name: "container without image", body: mut(func(w *meridianv1.Workload) {
			w.Runtime = &meridianv1.RuntimeTemplate{Kind: &meridianv1.RuntimeTemplate_Container{Container: &meridianv1.ContainerTemplate{}}}
		}), field: "runtime.container.image"},
		{name: "idempotency key too long", body: mut(func(w *meridianv1.Workload) { w.IdempotencyKey = strings.Repeat("k", 129) }), field: "idempotency_key"},
		{name: "idempotency header differs from body", body: mut(func(w *meridianv1.Workload) { w.IdempotencyKey = "a" }),
			hdr: map[string]string{IdempotencyHeader: "b"}, field: "idempotency_key"},
		{name: "grpc nil workload", call: func(ctx context.Context) error {
			_, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{})
			return err
		}, field: "workload"},
		{name: "grpc runtime over 256KiB", call: func(ctx context.Context) error {
			w := validWorkload(leaf)
			w.Runtime = &meridianv1.RuntimeTemplate{Kind: &meridianv1.RuntimeTemplate_Slurm{Slurm: &meridianv1.SlurmTemplate{Script: "#!/bin/sh\n" + strings.Repeat("#", 200<<10)}}}
			w.Labels = nil
			w.PodSets[0].Name = strings.Repeat("a", 63)
			w.Runtime.GetSlurm().Env = map[string]string{"PAD": strings.Repeat("p", 60<<10)}
			_, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: w})
			return err
		}, field: "runtime"},
		{name: "grpc bad page token", call: func(ctx context.Context) error {
			_, err := e.wl.ListWorkloads(ctx, &meridianv1.ListWorkloadsRequest{PageToken: "!!not-a-token"})
			return err
		}, field: "page_token"},
		{name: "grpc page token for other filters", call: func(ctx context.Context) error {
			tok := encodeToken(pageToken{Last: "wl-00000000000000000000000000", Filter: filterHash("other")})
			_, err := e.wl.ListWorkloads(ctx, &meridianv1.ListWorkloadsRequest{PageToken: tok})
			return err
		}, field: "page_token"},
		{name: "grpc page size too big", call: func(ctx context.Context) error {
			_, err := e.wl.ListWorkloads(ctx, &meridianv1.ListWorkloadsRequest{PageSize: 5000})
			return err
		}, field: "page_size"},
		{name: "grpc negative page size", call: func(ctx context.Context) error {
			_, err := e.qs.ListQueues(ctx, &meridianv1.ListQueuesRequest{PageSize: -1})
			return err
		}, field: "page_size"},
		{name: "grpc bad label selector", call: func(ctx context.Context) error {
			_, err := e.wl.ListWorkloads(ctx, &meridianv1.ListWorkloadsRequest{LabelSelector: "team"})
			return err
		}, field: "label_selector"},
		{name: "grpc get bad id", call: func(ctx context.Context) error {
			_, err := e.wl.GetWorkload(ctx, &meridianv1.GetWorkloadRequest{Id: "../../etc"})
			return err
		}, field: "id"},
		{name: "grpc cancel without id", call: func(ctx context.Context) error {
			_, err := e.wl.CancelWorkload(ctx, &meridianv1.CancelWorkloadRequest{})
			return err
		}, field: "id"},
		{name: "grpc queue negative quota", call: func(ctx context.Context) error {
			_, err := e.qs.CreateQueue(ctx, &meridianv1.CreateQueueRequest{Queue: &meridianv1.Queue{Path: tn + "/q2",
				Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: "nvidia-h100-80gb", NominalMilliGpus: -1}}}})
			return err
		}, field: "quotas[0].nominal_milli_gpus"},
		{name: "grpc queue bad path", call: func(ctx context.Context) error {
			_, err := e.qs.CreateQueue(ctx, &meridianv1.CreateQueueRequest{Queue: &meridianv1.Queue{Path: "/lead"}})
			return err
		}, field: "path"},
		{name: "grpc queue revision on create", call: func(ctx context.Context) error {
			_, err := e.qs.CreateQueue(ctx, &meridianv1.CreateQueueRequest{Queue: &meridianv1.Queue{Path: tn + "/q3", Revision: 5}})
			return err
		}, field: "revision"},
		{name: "grpc update mask unknown field", call: func(ctx context.Context) error {
			_, err := e.qs.UpdateQueue(ctx, &meridianv1.UpdateQueueRequest{Queue: &meridianv1.Queue{Path: leaf}, UpdateMask: maskOf("create_time")})
			return err
		}, field: "update_mask.paths[0]"},
		{name: "grpc watch bad queue", call: func(ctx context.Context) error {
			s, err := e.wl.WatchWorkloads(ctx, &meridianv1.WatchWorkloadsRequest{Queue: "Bad Queue"})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		}, field: "queue"},
	}
	if len(cases) < 30 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := e.keyCount(t)
			var err error
			if c.call != nil {
				err = c.call(testCtx(t))
			} else {
				r := e.rest(t, "POST", "/v1/workloads", c.body, c.hdr)
				want := c.status
				if want == 0 {
					want = http.StatusBadRequest
				}
				if r.code != want {
					t.Fatalf("HTTP %d, want %d: %s", r.code, want, r.body)
				}
				err = r.status(t).Err()
			}
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("code %v, want InvalidArgument: %v", status.Code(err), err)
			}
			if f := fields(err); !slices.Contains(f, c.field) {
				t.Fatalf("violations name %v, want %q (%v)", f, c.field, err)
			}
			if after := e.keyCount(t); after != before {
				t.Fatalf("etcd has %d keys after, %d before: something was stored", after, before)
			}
		})
	}
}

// TestOversizedGRPC: a message over the server's receive limit is refused
// by gRPC itself with ResourceExhausted, and nothing is stored.
func TestOversizedGRPC(t *testing.T) {
	e := newEnv(t)
	before := e.keyCount(t)
	w := validWorkload("a/b")
	w.Runtime = &meridianv1.RuntimeTemplate{Kind: &meridianv1.RuntimeTemplate_Slurm{Slurm: &meridianv1.SlurmTemplate{Script: strings.Repeat("#", 2<<20)}}}
	_, err := e.wl.SubmitWorkload(testCtx(t), &meridianv1.SubmitWorkloadRequest{Workload: w})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "larger than max") {
		t.Fatalf("got %v", err)
	}
	if after := e.keyCount(t); after != before {
		t.Fatalf("etcd has %d keys after, %d before", after, before)
	}
}
