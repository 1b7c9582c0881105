package k8shub

import (
	"bytes"
	"context"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/meridian-gpu/meridian/connectors/kubernetes"
	"github.com/meridian-gpu/meridian/internal/cli"
	"github.com/meridian-gpu/meridian/internal/e2e/e2eutil"
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
	failed    = meridianv1.WorkloadPhase_WORKLOAD_PHASE_FAILED
	accepted  = meridianv1.WorkloadPhase_WORKLOAD_PHASE_ACCEPTED
)

// ctl runs meridianctl's code path (internal/cli.Main) against the hub,
// with the fixture's admin token, and returns its stdout; a non-zero exit
// fails the test.
func (f *fixture) ctl(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code := cli.Main(ctx, append(f.h.CtlArgs(), args...), cli.Env{Stdout: &out, Stderr: &errb})
	if code != cli.ExitOK {
		f.Failf(t, "meridianctl %v: exit %d\n%s%s", args, code, out.String(), errb.String())
	}
	return out.String()
}

// TestClassDecidesTheSpoke submits, over gRPC and at once, a workload for
// a class only the KWOK nodes have and one for the simulated cluster's
// class: each runs where its class is and succeeds.
func TestClassDecidesTheSpoke(t *testing.T) {
	f := need(t)
	k8s := f.Submit(t, k8sWorkload(t, "e2e-a100-80", 1, 1000, a100k8s, 3*time.Second))
	sim := f.Submit(t, simWorkload("e2e-a100-40", 2, 1000, a100sim, time.Second))

	w := f.WaitPhase(t, k8s, succeeded, 90*time.Second)
	if w.GetStatus().GetCluster() != f.k8sID || w.GetStatus().ExitCode == nil || w.GetStatus().GetExitCode() != 0 {
		f.Failf(t, "the A100-80GB workload ran on %q with exit %s, want %s and 0", w.GetStatus().GetCluster(), e2eutil.ExitOf(w.GetStatus().ExitCode), f.k8sID)
	}
	did := w.GetStatus().GetDispatchId()
	jobs := f.jobsOf(t, did)
	if len(jobs) != 1 {
		f.Failf(t, "dispatch %s has %d Jobs, want 1", did, len(jobs))
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

	w = f.WaitPhase(t, sim, succeeded, 60*time.Second)
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

	w := f.WaitPhase(t, id, running, 90*time.Second)
	if w.GetStatus().GetCluster() != f.k8sID {
		f.Failf(t, "the gang runs on %q, want %s", w.GetStatus().GetCluster(), f.k8sID)
	}
	did := w.GetStatus().GetDispatchId()
	// Running means every replica's pod runs: both are bound now.
	pods := f.podsOf(t, did)
	if len(pods) != 2 {
		f.Failf(t, "the running gang has %d pods, want 2", len(pods))
	}
	for _, p := range pods {
		if n := p.Spec.NodeName; n != nodeH0 && n != nodeH1 {
			t.Errorf("gang pod %s on %q, want an H100 node", p.Name, n)
		}
		if q := p.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]; q.Value() != 4 {
			t.Errorf("gang pod %s asks for %s nvidia.com/gpu, want 4", p.Name, q.String())
		}
	}
	w = f.WaitPhase(t, id, succeeded, 90*time.Second)
	if w.GetStatus().ExitCode == nil || w.GetStatus().GetExitCode() != 0 {
		t.Errorf("the gang succeeded with exit %s, want 0", e2eutil.ExitOf(w.GetStatus().ExitCode))
	}
	jobs := f.jobsOf(t, did)
	if len(jobs) != 1 {
		f.Failf(t, "the gang has %d Jobs, want one Indexed Job", len(jobs))
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
	id := f.Submit(t, k8sWorkload(t, "e2e-long", 1, 1000, h100, 10*time.Minute))
	w := f.WaitPhase(t, id, running, 90*time.Second)
	if w.GetStatus().GetCluster() != f.k8sID {
		f.Failf(t, "the long workload runs on %q, want %s", w.GetStatus().GetCluster(), f.k8sID)
	}
	did := w.GetStatus().GetDispatchId()
	if jobs, pods := f.jobsOf(t, did), f.podsOf(t, did); len(jobs) != 1 || len(pods) != 1 || pods[0].Status.Phase != corev1.PodRunning {
		f.Failf(t, "the running workload has %d Jobs and %d pods (%s), want one running pod", len(jobs), len(pods), phases(pods))
	}
	if use, n := f.queueUsage(t); use[h100] < 1000 || n < 1 {
		t.Errorf("while it runs queue %s uses %d milli H100 with %d running workloads, want at least 1000 and 1", queue, use[h100], n)
	}

	f.ctl(t, "cancel", id, "--reason", "e2e")
	w = f.WaitPhase(t, id, cancelled, 30*time.Second)
	if w.GetStatus().GetCluster() != f.k8sID {
		t.Errorf("the cancelled workload names cluster %q, want %s", w.GetStatus().GetCluster(), f.k8sID)
	}
	f.eventually(t, 60*time.Second, "the cancelled workload's Job and pods to be gone from the apiserver", func() bool {
		return len(f.jobsOf(t, did)) == 0 && len(f.podsOf(t, did)) == 0
	})
}

// TestFailedPodFailsTheWorkload submits a 2 x 1-GPU H100 gang that KWOK
// would keep running for 10 minutes; once the hub reports it RUNNING, one
// pod fails with exit code 3. The hub then reports it FAILED with the
// Job's reason and exit code 3, over gRPC and through `meridianctl get`;
// the other pod stops, and the queue's charge goes back to what it was.
func TestFailedPodFailsTheWorkload(t *testing.T) {
	f := need(t)
	useBefore, runBefore := f.queueUsage(t)
	id := f.Submit(t, k8sWorkload(t, "e2e-fails", 2, 1000, h100, 10*time.Minute))
	w := f.WaitPhase(t, id, running, 90*time.Second)
	if w.GetStatus().GetCluster() != f.k8sID {
		f.Failf(t, "the gang runs on %q, want %s", w.GetStatus().GetCluster(), f.k8sID)
	}
	did := w.GetStatus().GetDispatchId()
	pods := f.podsOf(t, did)
	if len(pods) != 2 || pods[0].Status.Phase != corev1.PodRunning || pods[1].Status.Phase != corev1.PodRunning {
		f.Failf(t, "the running gang has %d pods (%s), want 2 running", len(pods), phases(pods))
	}
	if use, n := f.queueUsage(t); use[h100] != useBefore[h100]+2000 || n != runBefore+1 {
		t.Errorf("while it runs queue %s uses %d milli H100 with %d running workloads, want %d and %d",
			queue, use[h100], n, useBefore[h100]+2000, runBefore+1)
	}

	f.failPod(t, pods[0].Name, 3)
	// The Job controller sets the Job's Failed condition once the gang's
	// other pod is gone; KWOK deletes it at a random point within its 30s
	// grace period.
	w = f.WaitPhase(t, id, failed, 90*time.Second)
	st := w.GetStatus()
	if st.ExitCode == nil || st.GetExitCode() != 3 {
		t.Errorf("the failed workload reports exit code %s, want 3", e2eutil.ExitOf(st.ExitCode))
	}
	// The Job controller fails the Job (backoffLimit 0); its condition's
	// reason is what the connector reports and the hub keeps.
	if !strings.Contains(st.GetMessage(), "BackoffLimitExceeded") {
		t.Errorf("the failed workload's message is %q, want the Job's reason BackoffLimitExceeded", st.GetMessage())
	}
	t.Logf("workload %s: %s with exit code %s, message %q", id, st.GetPhase(), e2eutil.ExitOf(st.ExitCode), st.GetMessage())
	if st.GetCluster() != f.k8sID || st.GetDispatchId() != did {
		t.Errorf("the failed workload names cluster %q dispatch %q, want %s and %s", st.GetCluster(), st.GetDispatchId(), f.k8sID, did)
	}

	// meridianctl shows the same, as text and as JSON.
	out := f.ctl(t, "get", id)
	for _, re := range []string{`(?m)^Phase:\s+FAILED\s*$`, `(?m)^Exit code:\s+3\s*$`, `(?m)^Message:\s+.*BackoffLimitExceeded`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("meridianctl get %s does not match %s:\n%s", id, re, out)
		}
	}
	var got meridianv1.Workload
	if err := protojson.Unmarshal([]byte(f.ctl(t, "get", id, "-o", "json")), &got); err != nil {
		t.Fatalf("meridianctl get -o json: %v", err)
	}
	if gs := got.GetStatus(); gs.GetPhase() != failed || gs.ExitCode == nil || gs.GetExitCode() != 3 || gs.GetMessage() != st.GetMessage() {
		t.Errorf("meridianctl get -o json: phase %s exit %s message %q, want FAILED, 3 and %q", gs.GetPhase(), e2eutil.ExitOf(gs.ExitCode), gs.GetMessage(), st.GetMessage())
	}

	jobs := f.jobsOf(t, did)
	if len(jobs) != 1 {
		f.Failf(t, "the failed gang has %d Jobs, want its one Job kept", len(jobs))
	}
	if cs, _ := jobCondition(&jobs[0], batchv1.JobFailed); cs != corev1.ConditionTrue {
		t.Errorf("Job %s: Failed condition %q, want True", jobs[0].Name, cs)
	}
	// All or nothing: the gang's other pod does not keep running.
	f.eventually(t, 60*time.Second, "no pod of the failed gang to be running", func() bool {
		for _, p := range f.podsOf(t, did) {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				return false
			}
		}
		return true
	})
	f.eventually(t, 30*time.Second, "the failed gang's GPUs to leave the queue's usage", func() bool {
		use, n := f.queueUsage(t)
		return use[h100] == useBefore[h100] && n == runBefore
	})
}

// A fractional case: one mode of the connector, served by a Kubernetes
// spoke configured with that mode alone.
type fractionalCase struct {
	mode      string                    // the connector's mode
	want      meridianv1.FractionalMode // the workload's fractional_mode
	class     string
	milli     int32
	memMiB    int32
	selector  bool     // hami and kai both serve MEMORY: only a cluster selector tells the hub which
	runs      bool     // the KWOK nodes carry the resource and the scheduler exists
	nodes     []string // where it may run
	scheduler string   // the pod's schedulerName ("" for the default scheduler)
	check     func(t *testing.T, c corev1.Container, anns map[string]string)
}

var fractionalCases = []fractionalCase{
	{mode: kubernetes.ModeHAMi, want: meridianv1.FractionalMode_FRACTIONAL_MODE_MEMORY, class: h100, milli: 300, memMiB: 16384, selector: true,
		check: func(t *testing.T, c corev1.Container, _ map[string]string) {
			l := c.Resources.Limits
			g, cores, mem := l[kubernetes.ResourceGPU], l[kubernetes.ResourceGPUCores], l[kubernetes.ResourceGPUMem]
			if g.Value() != 1 || cores.Value() != 30 || mem.Value() != 16384 {
				t.Errorf("hami limits %s, want nvidia.com/gpu 1, gpucores 30, gpumem 16384", quantities(l))
			}
		}},
	{mode: kubernetes.ModeKAI, want: meridianv1.FractionalMode_FRACTIONAL_MODE_MEMORY, class: h100, milli: 500, selector: true, scheduler: "kai-scheduler",
		check: func(t *testing.T, c corev1.Container, anns map[string]string) {
			if anns[kubernetes.AnnotationGPUFraction] != "0.5" {
				t.Errorf("kai pod annotations %v, want %s: 0.5", anns, kubernetes.AnnotationGPUFraction)
			}
			if len(c.Resources.Limits) != 0 {
				t.Errorf("kai pod limits %s, want none (KAI places the fraction, not the device plugin)", quantities(c.Resources.Limits))
			}
		}},
	{mode: kubernetes.ModeMIG, want: meridianv1.FractionalMode_FRACTIONAL_MODE_MIG, class: a100k8s, milli: 100, memMiB: 8000, runs: true, nodes: []string{nodeA100},
		check: func(t *testing.T, c corev1.Container, _ map[string]string) {
			l := c.Resources.Limits
			if q := l["nvidia.com/mig-1g.10gb"]; q.Value() != 1 || len(l) != 1 {
				t.Errorf("mig limits %s, want only nvidia.com/mig-1g.10gb 1 (the smallest profile with 8000 MiB)", quantities(l))
			}
		}},
	{mode: kubernetes.ModeTimeSlicing, want: meridianv1.FractionalMode_FRACTIONAL_MODE_TIME_SLICE, class: h100, milli: 250, runs: true, nodes: []string{nodeH0, nodeH1},
		check: func(t *testing.T, c corev1.Container, _ map[string]string) {
			l := c.Resources.Limits
			if q := l[kubernetes.ResourceGPU]; q.Value() != 1 || len(l) != 1 {
				t.Errorf("time-slicing limits %s, want only nvidia.com/gpu 1 (a shared replica)", quantities(l))
			}
		}},
}

// TestFractionalModesThroughTheHub submits, over gRPC, one fractional
// workload per mode of the connector. Four more Kubernetes spokes run for
// it on the same control plane, each configured with one mode (its own
// cluster id and label, Jobs in the same namespace): the hub must send a
// workload to a cluster that advertises its fractional mode, and one mode
// per spoke shows which the hub chose. MIG and time-slicing have a spoke
// of their own, so the mode alone decides; hami and kai both serve
// MEMORY, so those workloads also carry a cluster selector. Each pod
// carries its mode's resources, annotations and scheduler. The KWOK nodes
// advertise nvidia.com/mig-1g.10gb and nvidia.com/gpu, so the MIG and
// time-slicing workloads run and succeed; they advertise no HAMi
// resources (nvidia.com/gpucores, gpumem) and no KAI scheduler runs
// here, so those pods are created but stay unscheduled, and the
// workloads are cancelled from the hub once their pods are checked.
func TestFractionalModesThroughTheHub(t *testing.T) {
	f := need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spokes := map[string]string{} // mode -> cluster id
	var ids []string
	for _, tc := range fractionalCases {
		id := f.k8sID + "-" + tc.mode
		stop, err := f.startKubeSpoke(ctx, id, map[string]string{"scheduler": "kubernetes", "fractional": tc.mode}, []string{tc.mode})
		if err != nil {
			f.Failf(t, "start the %s spoke: %v", tc.mode, err)
		}
		t.Cleanup(stop)
		spokes[tc.mode] = id
		ids = append(ids, id)
	}
	if err := f.waitClusters(ctx, 60*time.Second, ids...); err != nil {
		f.Failf(t, "the fractional spokes: %v", err)
	}
	// Each advertises its one mode.
	cl, err := f.cl.ListClusters(ctx, &meridianv1.ListClustersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range fractionalCases {
		for _, c := range cl.GetClusters() {
			if c.GetId() == spokes[tc.mode] && !slices.Equal(c.GetFractionalModes(), []meridianv1.FractionalMode{tc.want}) {
				t.Errorf("cluster %s advertises fractional modes %v, want [%s]", c.GetId(), c.GetFractionalModes(), tc.want)
			}
		}
	}

	// All four at once: the hub places them in one pass or a few.
	wids := make([]string, len(fractionalCases))
	for i, tc := range fractionalCases {
		w := k8sWorkload(t, "e2e-frac-"+tc.mode, 1, tc.milli, tc.class, time.Second)
		r := w.PodSets[0].Resources
		r.GpuMemoryMib, r.FractionalMode = tc.memMiB, tc.want
		if tc.selector {
			w.ClusterSelector = map[string]string{"fractional": tc.mode}
		}
		wids[i] = f.Submit(t, w)
	}
	for i, tc := range fractionalCases {
		t.Run(tc.mode, func(t *testing.T) {
			id := wids[i]
			want := accepted
			if tc.runs {
				want = succeeded
			}
			w := f.WaitPhase(t, id, want, 90*time.Second)
			if got := w.GetStatus().GetCluster(); got != spokes[tc.mode] {
				f.Failf(t, "the %s workload went to %q, want %s, the only spoke with that mode", tc.mode, got, spokes[tc.mode])
			}
			did := w.GetStatus().GetDispatchId()
			jobs := f.clusterJobs(t, spokes[tc.mode], did)
			if len(jobs) != 1 || jobs[0].Annotations[kubernetes.AnnFractionMode] != tc.mode {
				f.Failf(t, "dispatch %s: %d Jobs, want one annotated %s=%s", did, len(jobs), kubernetes.AnnFractionMode, tc.mode)
			}
			var pods []corev1.Pod
			f.eventually(t, 30*time.Second, "the "+tc.mode+" Job's pod", func() bool {
				pods = f.clusterPods(t, spokes[tc.mode], did)
				return len(pods) == 1
			})
			p := pods[0]
			tc.check(t, p.Spec.Containers[0], p.Annotations)
			if p.Spec.SchedulerName != tc.scheduler && !(tc.scheduler == "" && p.Spec.SchedulerName == corev1.DefaultSchedulerName) {
				t.Errorf("%s pod schedulerName %q, want %q", tc.mode, p.Spec.SchedulerName, tc.scheduler)
			}
			if tc.runs {
				if p.Status.Phase != corev1.PodSucceeded || !slices.Contains(tc.nodes, p.Spec.NodeName) {
					t.Errorf("%s pod %s is %s on %q, want Succeeded on one of %v", tc.mode, p.Name, p.Status.Phase, p.Spec.NodeName, tc.nodes)
				}
				if ec := w.GetStatus().ExitCode; ec == nil || *ec != 0 || w.GetStatus().GetStartTime() == nil {
					t.Errorf("the %s workload succeeded with exit %s and start time %v, want 0 and the time it ran", tc.mode, e2eutil.ExitOf(ec), w.GetStatus().GetStartTime())
				}
				return
			}
			// No node can take it here: it is created, and stays unbound.
			if p.Status.Phase != corev1.PodPending || p.Spec.NodeName != "" {
				t.Errorf("%s pod %s is %s on %q, want Pending and unbound", tc.mode, p.Name, p.Status.Phase, p.Spec.NodeName)
			}
			if _, err := f.wl.CancelWorkload(ctx, &meridianv1.CancelWorkloadRequest{Id: id, Reason: "e2e: no " + tc.mode + " here"}); err != nil {
				t.Fatalf("cancel %s: %v", id, err)
			}
			f.WaitPhase(t, id, cancelled, 30*time.Second)
			f.eventually(t, 60*time.Second, "the cancelled "+tc.mode+" workload's Job and pod to be gone", func() bool {
				return len(f.clusterJobs(t, spokes[tc.mode], did)) == 0 && len(f.clusterPods(t, spokes[tc.mode], did)) == 0
			})
		})
	}
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

// quantities prints a resource list as name=quantity pairs.
func quantities(l corev1.ResourceList) string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(l)) {
		q := l[name]
		out = append(out, string(name)+"="+q.String())
	}
	return "[" + strings.Join(out, " ") + "]"
}
