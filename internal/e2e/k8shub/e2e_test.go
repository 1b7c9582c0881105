package k8shub

import (
	"bytes"
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/meridian-gpu/meridian/connectors/kubernetes"
	"github.com/meridian-gpu/meridian/internal/cli"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// These tests run the whole path on a mixed fleet: a gRPC or meridianctl
// submit, the hub's scheduling loop, JetStream, a real spoke agent with
// the Kubernetes connector, the real kube-apiserver, controller-manager
// and scheduler with KWOK's nodes running the pods, the Job's end, events
// back, and the workload's final phase; a simulated cluster beside it. They
// run in source order and share one hub.

const (
	succeeded = meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED
	cancelled = meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED
	running   = meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING
)

// ctl runs meridianctl's code path (internal/cli.Main) against the hub and
// returns its stdout; a non-zero exit fails the test.
func (f *fixture) ctl(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code := cli.Main(ctx, append([]string{"--hub", f.grpcAdr}, args...), cli.Env{Stdout: &out, Stderr: &errb})
	if code != cli.ExitOK {
		f.failf(t, "meridianctl %v: exit %d\n%s%s", args, code, out.String(), errb.String())
	}
	return out.String()
}

// TestClassDecidesTheSpoke submits, over gRPC and at once, a workload for
// a class only the KWOK nodes have and one for the simulated cluster's
// class: each runs where its class is and succeeds.
func TestClassDecidesTheSpoke(t *testing.T) {
	f := need(t)
	k8s := f.submit(t, k8sWorkload(t, "e2e-a100-80", 1, 1000, a100k8s, 3*time.Second))
	sim := f.submit(t, simWorkload("e2e-a100-40", 2, 1000, a100sim, time.Second))

	w := f.waitPhase(t, k8s, succeeded, 90*time.Second)
	if w.GetStatus().GetCluster() != f.k8sID || w.GetStatus().ExitCode == nil || w.GetStatus().GetExitCode() != 0 {
		f.failf(t, "the A100-80GB workload ran on %q with exit %v, want %s and 0", w.GetStatus().GetCluster(), w.GetStatus().ExitCode, f.k8sID)
	}
	did := w.GetStatus().GetDispatchId()
	jobs := f.jobsOf(t, did)
	if len(jobs) != 1 {
		f.failf(t, "dispatch %s has %d Jobs, want 1", did, len(jobs))
	}
	if st, _ := jobCondition(&jobs[0], batchv1.JobComplete); st != corev1.ConditionTrue {
		t.Errorf("Job %s: Complete condition %q, want True", jobs[0].Name, st)
	}
	pods := f.podsOf(t, did)
	if len(pods) != 1 || pods[0].Spec.NodeName != nodeA100 {
		t.Fatalf("dispatch %s: %d pods, the first on %q; want one on %s", did, len(pods), nodeOf(pods), nodeA100)
	}
	if got := pods[0].Annotations["pod-complete.stage.kwok.x-k8s.io/delay"]; got != "3s" {
		t.Errorf("pod %s: KWOK delay annotation %q, want 3s (from runtime.extra.pod_annotations)", pods[0].Name, got)
	}
	if got := pods[0].Spec.Containers[0].Image; got != image {
		t.Errorf("pod %s runs image %q, want %q", pods[0].Name, got, image)
	}

	w = f.waitPhase(t, sim, succeeded, 60*time.Second)
	if w.GetStatus().GetCluster() != simID {
		t.Errorf("the A100-40GB workload ran on %q, want %s", w.GetStatus().GetCluster(), simID)
	}
	if jobs := f.jobsOf(t, w.GetStatus().GetDispatchId()); len(jobs) != 0 {
		t.Errorf("the simulated cluster's workload has %d Jobs on Kubernetes, want none", len(jobs))
	}
}

// gangYAML is a 2 x 4 H100 gang as a user writes it for meridianctl; KWOK
// keeps its pods Running for 4s.
const gangYAML = `name: e2e-gang
queue: ` + queue + `
pod_sets:
  - name: workers
    replicas: 2
    resources:
      gpu_milli: 4000
      accelerator_class: ` + h100 + `
runtime:
  container:
    image: ` + image + `
    command: ["sh", "-c", "echo gang"]
  extra:
    pod_annotations:
      pod-complete.stage.kwok.x-k8s.io/delay: 4s
      pod-complete.stage.kwok.x-k8s.io/jitter-delay: 4s
`

// TestGangFromMeridianctlRunsWhole submits a 2 x 4-GPU gang with
// `meridianctl submit -f`: it goes to the Kubernetes spoke whole, as one
// Indexed Job whose two pods both run on H100 nodes with 4 GPUs each, and
// succeeds.
func TestGangFromMeridianctlRunsWhole(t *testing.T) {
	f := need(t)
	file := filepath.Join(t.TempDir(), "gang.yaml")
	if err := os.WriteFile(file, []byte(gangYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	out := f.ctl(t, "submit", "-f", file, "-o", "json")
	var sub meridianv1.SubmitWorkloadResponse
	if err := protojson.Unmarshal([]byte(out), &sub); err != nil || sub.GetWorkload().GetId() == "" {
		t.Fatalf("meridianctl submit -o json printed %q (%v), want the submitted workload", out, err)
	}
	id := sub.GetWorkload().GetId()

	w := f.waitPhase(t, id, running, 90*time.Second)
	if w.GetStatus().GetCluster() != f.k8sID {
		f.failf(t, "the gang runs on %q, want %s", w.GetStatus().GetCluster(), f.k8sID)
	}
	did := w.GetStatus().GetDispatchId()
	// Running means every replica's pod runs: both are bound now.
	pods := f.podsOf(t, did)
	if len(pods) != 2 {
		f.failf(t, "the running gang has %d pods, want 2", len(pods))
	}
	for _, p := range pods {
		if n := p.Spec.NodeName; n != nodeH0 && n != nodeH1 {
			t.Errorf("gang pod %s on %q, want an H100 node", p.Name, n)
		}
		if q := p.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]; q.Value() != 4 {
			t.Errorf("gang pod %s asks for %s nvidia.com/gpu, want 4", p.Name, q.String())
		}
	}
	w = f.waitPhase(t, id, succeeded, 90*time.Second)
	if w.GetStatus().ExitCode == nil || w.GetStatus().GetExitCode() != 0 {
		t.Errorf("the gang succeeded with exit %v, want 0", w.GetStatus().ExitCode)
	}
	jobs := f.jobsOf(t, did)
	if len(jobs) != 1 {
		f.failf(t, "the gang has %d Jobs, want one Indexed Job", len(jobs))
	}
	j := jobs[0]
	if j.Spec.CompletionMode == nil || *j.Spec.CompletionMode != batchv1.IndexedCompletion ||
		*j.Spec.Parallelism != 2 || *j.Spec.Completions != 2 || j.Status.Succeeded != 2 {
		t.Errorf("Job %s: mode %v parallelism %d completions %d succeeded %d, want Indexed 2/2/2",
			j.Name, j.Spec.CompletionMode, *j.Spec.Parallelism, *j.Spec.Completions, j.Status.Succeeded)
	}
	if j.Annotations[kubernetes.AnnWorkloadID] != id {
		t.Errorf("Job %s belongs to workload %q, want %s", j.Name, j.Annotations[kubernetes.AnnWorkloadID], id)
	}
	// meridianctl reads the same workload back.
	out = f.ctl(t, "get", id, "-o", "json")
	var got meridianv1.Workload
	if err := protojson.Unmarshal([]byte(out), &got); err != nil || got.GetStatus().GetPhase() != succeeded {
		t.Errorf("meridianctl get %s: phase %s (%v), want SUCCEEDED", id, got.GetStatus().GetPhase(), err)
	}
}

// TestCancelFromMeridianctl cancels a long-running Kubernetes workload with
// `meridianctl cancel`: it ends CANCELLED, and its Job and pods are gone
// from the apiserver. While it runs, its queue is charged for its GPU.
func TestCancelFromMeridianctl(t *testing.T) {
	f := need(t)
	id := f.submit(t, k8sWorkload(t, "e2e-long", 1, 1000, h100, 10*time.Minute))
	w := f.waitPhase(t, id, running, 90*time.Second)
	if w.GetStatus().GetCluster() != f.k8sID {
		f.failf(t, "the long workload runs on %q, want %s", w.GetStatus().GetCluster(), f.k8sID)
	}
	did := w.GetStatus().GetDispatchId()
	if jobs, pods := f.jobsOf(t, did), f.podsOf(t, did); len(jobs) != 1 || len(pods) != 1 || pods[0].Status.Phase != corev1.PodRunning {
		f.failf(t, "the running workload has %d Jobs and %d pods (%s), want one running pod", len(jobs), len(pods), phases(pods))
	}
	if use, n := f.queueUsage(t); use[h100] < 1000 || n < 1 {
		t.Errorf("while it runs queue %s uses %d milli H100 with %d running workloads, want at least 1000 and 1", queue, use[h100], n)
	}

	f.ctl(t, "cancel", id, "--reason", "e2e")
	w = f.waitPhase(t, id, cancelled, 30*time.Second)
	if w.GetStatus().GetCluster() != f.k8sID {
		t.Errorf("the cancelled workload names cluster %q, want %s", w.GetStatus().GetCluster(), f.k8sID)
	}
	f.eventually(t, 60*time.Second, "the cancelled workload's Job and pods to be gone from the apiserver", func() bool {
		return len(f.jobsOf(t, did)) == 0 && len(f.podsOf(t, did)) == 0
	})
}

// TestQueueUsageReturnsToZero runs last: once every workload above has
// ended, the hub charges the queue nothing, on any class.
func TestQueueUsageReturnsToZero(t *testing.T) {
	f := need(t)
	var use map[string]int64
	var n int32
	f.eventually(t, 30*time.Second, "queue "+queue+" to be idle", func() bool {
		use, n = f.queueUsage(t)
		for _, m := range use {
			if m != 0 {
				return false
			}
		}
		return n == 0
	})
	if len(use) == 0 {
		t.Fatalf("queue %s reports no class at all, want its three classes at zero", queue)
	}
	t.Logf("queue %s after the runs: usage %v milli on classes %v, %d running", queue, use, slices.Sorted(maps.Keys(use)), n)
}

func nodeOf(pods []corev1.Pod) string {
	if len(pods) == 0 {
		return ""
	}
	return pods[0].Spec.NodeName
}

func phases(pods []corev1.Pod) []corev1.PodPhase {
	var out []corev1.PodPhase
	for _, p := range pods {
		out = append(out, p.Status.Phase)
	}
	return out
}
