package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meridian-gpu/meridian/internal/k8slocal"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// Only the tests about GPUs ask for GPUs: pods that must stay running
// (300s) are CPU-only, so parallel tests never wait for each other's GPUs.
//
// These tests run against a real kube-apiserver, controller-manager,
// scheduler and KWOK started by scripts/k8s-up.sh (with
// MERIDIAN_K8S_NO_BUILD=1: a test never starts the 15-20 minute cold
// build). They skip, loudly, when not root or when the binaries are not
// built, unless MERIDIAN_REQUIRE_K8S=1, in which case they fail.

var (
	k8sOnce sync.Once
	k8sRest *rest.Config
	k8sErr  error
	nsSeq   atomic.Int64
)

// The nodes scripts/k8s-up.sh creates.
const (
	nodeH100a = "gpu-h100-0"
	nodeH100b = "gpu-h100-1"
	nodeMIG   = "gpu-a100-mig"
)

func skipOrFail(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("MERIDIAN_REQUIRE_K8S") == "1" {
		t.Fatalf("MERIDIAN_REQUIRE_K8S=1 and %s", msg)
	}
	t.Skipf("SKIPPING real-Kubernetes test: %s (set MERIDIAN_REQUIRE_K8S=1 to make this a failure)", msg)
}

func needK8s(t *testing.T) *rest.Config {
	t.Helper()
	if testing.Short() {
		skipOrFail(t, "-short: not starting the Kubernetes control plane")
	}
	if os.Geteuid() != 0 {
		skipOrFail(t, "not root: the local control plane (scripts/k8s-up.sh) needs root")
	}
	k8sOnce.Do(func() {
		// Started (never built) by the test; see k8slocal.Up.
		var local *k8slocal.Local
		if local, k8sErr = k8slocal.Up(context.Background(), false, nil); k8sErr == nil {
			k8sRest = local.REST
		}
	})
	if k8sErr != nil {
		if errors.Is(k8sErr, k8slocal.ErrNotBuilt) {
			skipOrFail(t, k8sErr.Error())
		}
		t.Fatalf("local Kubernetes: %v", k8sErr)
	}
	return k8sRest
}

// testEnv is one test's namespace and connector.
type testEnv struct {
	t    *testing.T
	kube kubernetes.Interface
	ns   string
	cfg  Config
	rc   *rest.Config
}

var kwokToleration = corev1.Toleration{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}

func newEnv(t *testing.T, cfg Config) *testEnv {
	rc := needK8s(t)
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("mrd-test-%d-%d", os.Getpid(), nsSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	})
	cfg.REST, cfg.Namespace = rc, ns
	cfg.Tolerations = append(cfg.Tolerations, kwokToleration)
	if cfg.ClusterID == "" {
		cfg.ClusterID = "test-k8s"
	}
	return &testEnv{t: t, kube: kube, ns: ns, cfg: cfg, rc: rc}
}

func (e *testEnv) connector() *Connector {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := New(ctx, e.cfg)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	e.t.Cleanup(c.Close)
	return c
}

// jobsOf lists the dispatch's Jobs through the API (not a cache).
func (e *testEnv) jobsOf(dispatchID string) []batchv1.Job {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := e.kube.BatchV1().Jobs(e.ns).List(ctx, metav1.ListOptions{LabelSelector: LabelDispatch + "=" + labelSafe(dispatchID)})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []batchv1.Job
	for _, j := range l.Items {
		if j.DeletionTimestamp == nil {
			out = append(out, j)
		}
	}
	return out
}

// waitEvent reads events until one for id in state want arrives; events
// of other dispatches are ignored. It fails on a different terminal state.
func waitEvent(t *testing.T, c *Connector, id string, want agent.WorkState, within time.Duration) agent.WorkEvent {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case ev := <-c.Events():
			if ev.DispatchID != id {
				continue
			}
			if ev.State == want {
				return ev
			}
			if ev.State.Terminal() {
				t.Fatalf("dispatch %s: got %s (%s), want %s", id, ev.State, ev.Reason, want)
			}
		case <-deadline:
			t.Fatalf("dispatch %s: no %s event within %s", id, want, within)
		}
	}
}

// eventually polls cond (a cache read, never the API) until it holds.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out after %s waiting for %s", within, what)
}

// kwokDelay keeps a Job's pods Running for d before KWOK completes them.
// The jitter must be set too: KWOK's default jitter (5s) would otherwise
// cap the delay.
func kwokDelay(d string) map[string]any {
	return map[string]any{ExtraPodAnnotations: map[string]any{
		"pod-complete.stage.kwok.x-k8s.io/delay":        d,
		"pod-complete.stage.kwok.x-k8s.io/jitter-delay": d,
	}}
}

func TestK8sInventoryOfKWOKNodes(t *testing.T) {
	e := newEnv(t, Config{FractionalModes: []string{ModeMIG, ModeTimeSlicing}, Labels: map[string]string{"site": "test"}})
	c := e.connector()
	ctx := context.Background()
	var inv *agent.Inventory
	// Right after a restart of the control plane the node controller may
	// hold the nodes NotReady for a moment; the inventory says so.
	eventually(t, 30*time.Second, "the three KWOK nodes to be schedulable", func() bool {
		var err error
		if inv, err = c.Inventory(ctx); err != nil {
			t.Fatal(err)
		}
		ok := 0
		for _, n := range inv.Nodes {
			if n.Schedulable && (n.Name == nodeH100a || n.Name == nodeH100b || n.Name == nodeMIG) {
				ok++
			}
		}
		return ok == 3
	})
	if inv.Labels["site"] != "test" || inv.Labels[LabelConnector] != Kind || len(inv.FractionalModes) != 2 {
		t.Fatalf("labels %v modes %v", inv.Labels, inv.FractionalModes)
	}
	byName := map[string]int{}
	for i, n := range inv.Nodes {
		byName[n.Name] = i
	}
	type want struct {
		class, rack, clique string
		gpus, migGPUs       int
		mem                 int64
	}
	wants := map[string]want{
		nodeH100a: {"nvidia-h100-80gb", "rack-a", "clique-a.1", 8, 0, 81559},
		nodeH100b: {"nvidia-h100-80gb", "rack-a", "clique-a.1", 8, 0, 81559},
		nodeMIG:   {"nvidia-a100-80gb", "rack-b", "clique-b.1", 6, 2, 81920},
	}
	for name, w := range wants {
		i, ok := byName[name]
		if !ok {
			t.Fatalf("node %s missing from the inventory (%d nodes)", name, len(inv.Nodes))
		}
		n := inv.Nodes[i]
		if n.AcceleratorClass != w.class || n.Rack != w.rack || n.NvlinkDomain != w.clique || !n.Schedulable {
			t.Fatalf("%s: class %q rack %q nvlink %q schedulable %v", name, n.AcceleratorClass, n.Rack, n.NvlinkDomain, n.Schedulable)
		}
		if len(n.Gpus) != w.gpus || n.Gpus[0].TotalMemoryMib != w.mem || n.CpuMilliTotal != 64000 {
			t.Fatalf("%s: %d GPUs of %d MiB, cpu %d", name, len(n.Gpus), n.Gpus[0].TotalMemoryMib, n.CpuMilliTotal)
		}
		mig := 0
		slices := int32(0)
		for _, g := range n.Gpus {
			if len(g.MigProfiles) > 0 {
				mig++
				for _, s := range g.MigProfiles {
					if s.Profile != "1g.10gb" {
						t.Fatalf("%s: profile %q", name, s.Profile)
					}
					slices += s.Total
				}
			}
		}
		if mig != w.migGPUs || (mig > 0 && slices != 14) {
			t.Fatalf("%s: %d MIG GPUs with %d slices, want %d with 14", name, mig, slices, w.migGPUs)
		}
	}
}

func TestK8sCordonChangesInventory(t *testing.T) {
	e := newEnv(t, Config{})
	c := e.connector()
	ctx := context.Background()
	setCordon := func(on bool) {
		patch := fmt.Sprintf(`{"spec":{"unschedulable":%v}}`, on)
		if _, err := e.kube.CoreV1().Nodes().Patch(ctx, nodeH100b, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	state := func() (bool, string) {
		inv, err := c.Inventory(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range inv.Nodes {
			if n.Name == nodeH100b {
				return n.Schedulable, n.Labels[LabelNodeReason]
			}
		}
		t.Fatalf("%s not in inventory", nodeH100b)
		return false, ""
	}
	if ok, _ := state(); !ok {
		t.Fatalf("%s starts unschedulable", nodeH100b)
	}
	setCordon(true)
	t.Cleanup(func() { setCordon(false) })
	eventually(t, 10*time.Second, "the cordon to reach the inventory", func() bool { ok, why := state(); return !ok && why == "cordoned" })
	setCordon(false)
	eventually(t, 10*time.Second, "the uncordon to reach the inventory", func() bool { ok, _ := state(); return ok })
}

func TestK8sGangRunsAndSucceeds(t *testing.T) {
	t.Parallel() // own namespace and connector; nodes are shared read-only
	e := newEnv(t, Config{})
	c := e.connector()
	ctx := context.Background()
	id := fmt.Sprintf("d-gang%d", time.Now().UnixNano())
	d := makeDispatch(id).PodSet("workers", 2, 4000).Class("nvidia-h100-80gb").Hint("workers", nodeH100a, nodeH100a).
		Extra(kwokDelay("8s")).Obj()
	start := time.Now()
	if err := c.Launch(ctx, d); err != nil {
		t.Fatalf("Launch: %v", err)
	}
	jobs := e.jobsOf(id)
	if len(jobs) != 1 || *jobs[0].Spec.Completions != 2 || *jobs[0].Spec.Parallelism != 2 {
		t.Fatalf("jobs %d", len(jobs))
	}
	run := waitEvent(t, c, id, agent.StateRunning, 60*time.Second)
	t.Logf("running after %s", time.Since(start).Round(time.Millisecond))
	// Both replicas are bound to H100 nodes and their 8 GPUs are charged.
	ls, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ws *agent.WorkStatus
	for i := range ls {
		if ls[i].DispatchID == id {
			ws = &ls[i]
		}
	}
	if ws == nil || ws.WorkloadID != "wl-"+id || len(ws.Nodes) == 0 {
		t.Fatalf("List: %+v", ws)
	}
	for _, n := range ws.Nodes {
		if n != nodeH100a && n != nodeH100b {
			t.Fatalf("replica on %s, not an H100 node", n)
		}
	}
	// The inventory charges 4 GPUs for every replica still running. On a
	// loaded machine the first replica may finish before the second starts,
	// so the running replicas are counted on both sides of the read.
	runningPods := func() int {
		pods, err := e.kube.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				n++
			}
		}
		return n
	}
	before := runningPods()
	inv, err := c.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after := runningPods()
	used := 0
	for _, n := range inv.Nodes {
		for _, g := range n.Gpus {
			if len(g.MigProfiles) == 0 && g.FreeMilli == 0 {
				used++
			}
		}
	}
	if want := 4 * min(before, after); before == 0 && after == 0 || used < want {
		t.Fatalf("inventory shows %d busy GPUs with %d then %d replicas running, want at least %d", used, before, after, want)
	}
	done := waitEvent(t, c, id, agent.StateSucceeded, 60*time.Second)
	t.Logf("succeeded after %s", time.Since(start).Round(time.Millisecond))
	if done.ExitCode == nil || *done.ExitCode != 0 || done.Time.Before(run.Time) {
		t.Fatalf("succeeded event %+v", done)
	}
}

func TestK8sLaunchTwiceAndRestartCreateOneSet(t *testing.T) {
	t.Parallel() // own namespace and connector; nodes are shared read-only
	e := newEnv(t, Config{})
	c := e.connector()
	ctx := context.Background()
	id := fmt.Sprintf("d-twice%d", time.Now().UnixNano())
	d := makeDispatch(id).PodSet("a", 1, 0).PodSet("b", 2, 0).Extra(kwokDelay("300s")).Obj()
	for i := range 2 {
		if err := c.Launch(ctx, d); err != nil {
			t.Fatalf("Launch %d: %v", i, err)
		}
	}
	// A restarted agent (a fresh connector) adopts the work and does not
	// create it again, even when the dispatch is delivered once more.
	c2 := e.connector()
	if err := c2.Launch(ctx, d); err != nil {
		t.Fatalf("Launch after restart: %v", err)
	}
	if jobs := e.jobsOf(id); len(jobs) != 2 {
		t.Fatalf("%d jobs after three launches, want 2 (one per pod set)", len(jobs))
	}
	eventually(t, 30*time.Second, "the restarted connector to list the dispatch as running", func() bool {
		ls, _ := c2.List(ctx)
		return len(ls) == 1 && ls[0].DispatchID == id && ls[0].State == agent.StateRunning
	})
	// Another cluster id never sees (nor touches) these Jobs.
	other := *e
	other.cfg.ClusterID = "someone-else"
	c3 := other.connector()
	if ls, _ := c3.List(ctx); len(ls) != 0 {
		t.Fatalf("another agent lists %d of our dispatches", len(ls))
	}
	if err := c3.Cancel(ctx, id, false); err != nil {
		t.Fatal(err)
	}
	if jobs := e.jobsOf(id); len(jobs) != 2 {
		t.Fatalf("another agent's Cancel deleted our Jobs: %d left", len(jobs))
	}
}

func TestK8sCancelDeletesJobs(t *testing.T) {
	t.Parallel() // own namespace and connector; nodes are shared read-only
	e := newEnv(t, Config{})
	c := e.connector()
	ctx := context.Background()
	id := fmt.Sprintf("d-cancel%d", time.Now().UnixNano())
	d := makeDispatch(id).PodSet("w", 2, 0).Extra(kwokDelay("300s")).Obj()
	if err := c.Launch(ctx, d); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, id, agent.StateRunning, 60*time.Second)
	if err := c.Cancel(ctx, id, true); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	ev := waitEvent(t, c, id, agent.StatePreempted, 10*time.Second)
	if ev.Reason == "" {
		t.Fatal("preempted event without a reason")
	}
	// Background propagation: the Jobs go at once, the garbage collector
	// then deletes their pods (which may take their grace period to go).
	if jobs := e.jobsOf(id); len(jobs) != 0 {
		t.Fatalf("%d jobs left after Cancel", len(jobs))
	}
	eventually(t, 30*time.Second, "the pods to be deleted", func() bool {
		pods, err := e.kube.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: LabelDispatch + "=" + id})
		if err != nil {
			return false
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				return false
			}
		}
		return true
	})
	if err := c.Cancel(ctx, id, false); err != nil {
		t.Fatalf("second Cancel: %v", err)
	}
	if err := c.Cancel(ctx, "d-never-launched", false); err != nil {
		t.Fatalf("Cancel of an unknown dispatch: %v", err)
	}
	ls, _ := c.List(ctx)
	if len(ls) != 1 || ls[0].State != agent.StatePreempted {
		t.Fatalf("List after cancel: %+v", ls)
	}
}

func TestK8sFailedPodFailsTheGang(t *testing.T) {
	t.Parallel() // own namespace and connector; nodes are shared read-only
	e := newEnv(t, Config{})
	c := e.connector()
	ctx := context.Background()
	id := fmt.Sprintf("d-fail%d", time.Now().UnixNano())
	d := makeDispatch(id).PodSet("a", 1, 0).PodSet("b", 1, 0).Extra(kwokDelay("300s")).Obj()
	if err := c.Launch(ctx, d); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, id, agent.StateRunning, 60*time.Second)
	pods, err := e.kube.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: LabelPodSet + "=a"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of a: %v %v", len(pods.Items), err)
	}
	p := pods.Items[0]
	p.Status.Phase = corev1.PodFailed
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", Image: p.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error",
			StartedAt: metav1.Now(), FinishedAt: metav1.Now()}}}}
	if _, err := e.kube.CoreV1().Pods(e.ns).UpdateStatus(ctx, &p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("fail the pod: %v", err)
	}
	ev := waitEvent(t, c, id, agent.StateFailed, 60*time.Second)
	if ev.ExitCode == nil || *ev.ExitCode != 3 || ev.Reason == "" {
		t.Fatalf("failed event: exit %v reason %q", ev.ExitCode, ev.Reason)
	}
	// All or nothing: the other pod set's Job is stopped too.
	eventually(t, 30*time.Second, "the rest of the gang to be deleted", func() bool {
		for _, j := range e.jobsOf(id) {
			if j.Labels[LabelPodSet] == "b" {
				return false
			}
		}
		return true
	})
}

func TestK8sFractionalModes(t *testing.T) {
	t.Parallel() // own namespace and connector; nodes are shared read-only
	tests := map[string]struct {
		mode   string
		want   meridianv1.FractionalMode
		milli  int32
		mem    int32
		runs   bool   // KWOK nodes carry the resource, so the pod runs
		onNode string // node it must land on when it runs
		check  func(t *testing.T, pod corev1.PodSpec, anns map[string]string)
		// profile is Resources.mig_profile; rejected, when set, is part of
		// the rejection Launch must return (and nothing is created).
		profile, rejected string
	}{
		"mig-named-profile": {mode: ModeMIG, profile: "1g.10gb", runs: true, onNode: nodeMIG,
			check: func(t *testing.T, p corev1.PodSpec, _ map[string]string) {
				if q := p.Containers[0].Resources.Limits["nvidia.com/mig-1g.10gb"]; q.Value() != 1 || len(p.Containers[0].Resources.Limits) != 2 {
					t.Fatalf("limits %v, want memory and nvidia.com/mig-1g.10gb: 1", p.Containers[0].Resources.Limits)
				}
			}},
		"mig-named-profile-absent": {mode: ModeMIG, profile: "3g.40gb", rejected: "nvidia.com/mig-3g.40gb"},
		"mig": {mode: ModeMIG, want: meridianv1.FractionalMode_FRACTIONAL_MODE_MIG, milli: 100, mem: 8000, runs: true, onNode: nodeMIG,
			check: func(t *testing.T, p corev1.PodSpec, _ map[string]string) {
				if q := p.Containers[0].Resources.Limits["nvidia.com/mig-1g.10gb"]; q.Value() != 1 {
					t.Fatalf("limits %v", p.Containers[0].Resources.Limits)
				}
			}},
		"time-slicing": {mode: ModeTimeSlicing, want: meridianv1.FractionalMode_FRACTIONAL_MODE_TIME_SLICE, milli: 250, runs: true,
			check: func(t *testing.T, p corev1.PodSpec, _ map[string]string) {
				if q := p.Containers[0].Resources.Limits[ResourceGPU]; q.Value() != 1 {
					t.Fatalf("limits %v", p.Containers[0].Resources.Limits)
				}
			}},
		"hami": {mode: ModeHAMi, want: meridianv1.FractionalMode_FRACTIONAL_MODE_MEMORY, milli: 300, mem: 16384,
			check: func(t *testing.T, p corev1.PodSpec, _ map[string]string) {
				l := p.Containers[0].Resources.Limits
				g, cores, mem := l[ResourceGPU], l[ResourceGPUCores], l[ResourceGPUMem]
				if g.Value() != 1 || cores.Value() != 30 || mem.Value() != 16384 {
					t.Fatalf("limits %v", l)
				}
			}},
		"kai": {mode: ModeKAI, want: meridianv1.FractionalMode_FRACTIONAL_MODE_MEMORY, milli: 500,
			check: func(t *testing.T, p corev1.PodSpec, anns map[string]string) {
				if anns[AnnotationGPUFraction] != "0.5" || p.SchedulerName != "kai-scheduler" {
					t.Fatalf("annotations %v scheduler %q", anns, p.SchedulerName)
				}
				if _, ok := p.Containers[0].Resources.Limits[ResourceGPU]; ok {
					t.Fatal("kai pods must not request nvidia.com/gpu")
				}
			}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Config{FractionalModes: []string{tc.mode}})
			c := e.connector()
			ctx := context.Background()
			id := fmt.Sprintf("d-%s%d", name, time.Now().UnixNano())
			d := makeDispatch(id).PodSet("w", 1, tc.milli).GPUMem(tc.mem).Mode(tc.want).Extra(kwokDelay("1s")).Obj()
			d.Workload.PodSets[0].Resources.MigProfile = tc.profile
			if tc.rejected != "" {
				err := c.Launch(ctx, d)
				if !agent.IsRejected(err) || !strings.Contains(err.Error(), tc.rejected) {
					t.Fatalf("Launch: %v, want a rejection naming %s", err, tc.rejected)
				}
				if jobs := e.jobsOf(id); len(jobs) != 0 {
					t.Fatalf("%d Jobs created for a rejected dispatch", len(jobs))
				}
				return
			}
			if err := c.Launch(ctx, d); err != nil {
				t.Fatalf("Launch: %v", err)
			}
			jobs := e.jobsOf(id)
			if len(jobs) != 1 || jobs[0].Annotations[AnnFractionMode] != tc.mode {
				t.Fatalf("jobs %d", len(jobs))
			}
			// The apiserver accepted the pod template; the created pod carries it.
			var pod corev1.Pod
			eventually(t, 30*time.Second, "the Job's pod", func() bool {
				l, err := e.kube.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: LabelDispatch + "=" + id})
				if err == nil && len(l.Items) == 1 {
					pod = l.Items[0]
					return true
				}
				return false
			})
			tc.check(t, pod.Spec, pod.Annotations)
			if !tc.runs {
				return
			}
			waitEvent(t, c, id, agent.StateSucceeded, 60*time.Second)
			got, err := e.kube.CoreV1().Pods(e.ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			if err == nil && tc.onNode != "" && got.Spec.NodeName != tc.onNode {
				t.Fatalf("pod ran on %s, want %s", got.Spec.NodeName, tc.onNode)
			}
		})
	}
}

// Not parallel: TestK8sCoschedulingPodGroup installs the CRD afterwards.
func TestK8sGangCRDMissingIsAClearRejection(t *testing.T) {
	for _, tc := range []struct {
		cfg Config
		crd string
	}{
		{Config{Gang: GangCoscheduling}, "podgroups.scheduling.x-k8s.io"},
		{Config{Gang: GangKueue, KueueQueue: "q"}, "localqueues.kueue.x-k8s.io"},
	} {
		t.Run(tc.cfg.Gang, func(t *testing.T) {
			e := newEnv(t, tc.cfg)
			c := e.connector()
			id := fmt.Sprintf("d-crd%d", time.Now().UnixNano())
			err := c.Launch(context.Background(), makeDispatch(id).PodSet("w", 2, 1000).Obj())
			if !agent.IsRejected(err) || !strings.Contains(err.Error(), tc.crd) {
				t.Fatalf("err = %v, want a rejection naming %s", err, tc.crd)
			}
			if jobs := e.jobsOf(id); len(jobs) != 0 {
				t.Fatalf("%d jobs created despite the missing CRD", len(jobs))
			}
		})
	}
}

func TestK8sJobDeletedOutsideFailsTheDispatch(t *testing.T) {
	t.Parallel() // own namespace and connector; nodes are shared read-only
	e := newEnv(t, Config{})
	c := e.connector()
	ctx := context.Background()
	id := fmt.Sprintf("d-gone%d", time.Now().UnixNano())
	d := makeDispatch(id).PodSet("a", 1, 0).PodSet("b", 1, 0).Extra(kwokDelay("300s")).Obj()
	if err := c.Launch(ctx, d); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, id, agent.StateRunning, 60*time.Second)
	bg := metav1.DeletePropagationBackground
	if err := e.kube.BatchV1().Jobs(e.ns).Delete(ctx, JobName(id, "b"), metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(t, c, id, agent.StateFailed, 30*time.Second)
	if !strings.Contains(ev.Reason, "deleted outside meridian") {
		t.Fatalf("reason %q", ev.Reason)
	}
	eventually(t, 30*time.Second, "the rest of the gang to be deleted", func() bool { return len(e.jobsOf(id)) == 0 })
}

func TestK8sLeastPrivilegeRBAC(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	ctx := context.Background()
	name := "meridian-agent-" + e.ns
	clusterRules, nsRules := RBACRules(e.cfg)
	mustCreate := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("create %s: %v", what, err)
		}
	}
	_, err := e.kube.CoreV1().ServiceAccounts(e.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}, metav1.CreateOptions{})
	mustCreate("service account", err)
	_, err = e.kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: clusterRules}, metav1.CreateOptions{})
	mustCreate("cluster role", err)
	subj := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "agent", Namespace: e.ns}}
	_, err = e.kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subj,
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name}}, metav1.CreateOptions{})
	mustCreate("cluster role binding", err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.kube.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
		_ = e.kube.RbacV1().ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{})
	})
	_, err = e.kube.RbacV1().Roles(e.ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "agent"}, Rules: nsRules}, metav1.CreateOptions{})
	mustCreate("role", err)
	_, err = e.kube.RbacV1().RoleBindings(e.ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "agent"}, Subjects: subj,
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "agent"}}, metav1.CreateOptions{})
	mustCreate("role binding", err)
	tok, err := e.kube.CoreV1().ServiceAccounts(e.ns).CreateToken(ctx, "agent", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(600))}}, metav1.CreateOptions{})
	mustCreate("token", err)

	// The connector runs with only that token.
	e.cfg.REST = &rest.Config{Host: e.rc.Host, BearerToken: tok.Status.Token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	c := e.connector()
	inv, err := c.Inventory(ctx)
	if err != nil || len(inv.Nodes) < 3 {
		t.Fatalf("inventory with the agent's RBAC: %d nodes, %v", len(inv.Nodes), err)
	}
	id := fmt.Sprintf("d-rbac%d", time.Now().UnixNano())
	if err := c.Launch(ctx, makeDispatch(id).PodSet("w", 1, 0).Extra(kwokDelay("300s")).Obj()); err != nil {
		t.Fatalf("Launch with the agent's RBAC: %v", err)
	}
	waitEvent(t, c, id, agent.StateRunning, 60*time.Second)
	if err := c.Cancel(ctx, id, false); err != nil {
		t.Fatalf("Cancel with the agent's RBAC: %v", err)
	}
	waitEvent(t, c, id, agent.StateCancelled, 10*time.Second)

	// And nothing more: no writes outside its namespace, none to nodes or pods.
	sa := "system:serviceaccount:" + e.ns + ":agent"
	allowed := func(ra authorizationv1.ResourceAttributes) bool {
		t.Helper()
		sar, err := e.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: sa, ResourceAttributes: &ra}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sar.Status.Allowed
	}
	if !allowed(authorizationv1.ResourceAttributes{Namespace: e.ns, Verb: "create", Group: "batch", Resource: "jobs"}) {
		t.Fatal("SubjectAccessReview denies what the agent just did (create jobs in its namespace)")
	}
	for _, ra := range []authorizationv1.ResourceAttributes{
		{Namespace: "default", Verb: "create", Group: "batch", Resource: "jobs"},
		{Namespace: "kube-system", Verb: "delete", Group: "batch", Resource: "jobs"},
		{Verb: "patch", Resource: "nodes"},
		{Namespace: e.ns, Verb: "delete", Resource: "pods"},
		{Namespace: e.ns, Verb: "update", Group: "batch", Resource: "jobs"},
		{Namespace: e.ns, Verb: "get", Resource: "secrets"},
	} {
		if allowed(ra) {
			t.Errorf("the agent may %s %s/%s in %q; it must not", ra.Verb, ra.Group, ra.Resource, ra.Namespace)
		}
	}
}

func TestK8sEvictedPodPreemptsTheGang(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	c := e.connector()
	ctx := context.Background()
	id := fmt.Sprintf("d-evict%d", time.Now().UnixNano())
	d := makeDispatch(id).PodSet("w", 2, 0).Extra(kwokDelay("300s")).Obj()
	if err := c.Launch(ctx, d); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, id, agent.StateRunning, 60*time.Second)
	pods, err := e.kube.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: LabelDispatch + "=" + id})
	if err != nil || len(pods.Items) != 2 {
		t.Fatalf("pods: %d %v", len(pods.Items), err)
	}
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pods.Items[0].Name, Namespace: e.ns}}
	if err := e.kube.PolicyV1().Evictions(e.ns).Evict(ctx, ev); err != nil {
		t.Fatalf("evict: %v", err)
	}
	got := waitEvent(t, c, id, agent.StatePreempted, 30*time.Second)
	if !strings.Contains(got.Reason, "evicted") {
		t.Fatalf("reason %q", got.Reason)
	}
	eventually(t, 30*time.Second, "the gang's Job to be deleted", func() bool { return len(e.jobsOf(id)) == 0 })
}

// TestK8sCoschedulingPodGroup installs the scheduler-plugins PodGroup CRD
// (not the scheduler: pods stay Pending) and checks what a coscheduling
// gang creates and what Cancel removes. Not parallel: the CRD is
// cluster-wide and removed at the end.
func TestK8sCoschedulingPodGroup(t *testing.T) {
	e := newEnv(t, Config{Gang: GangCoscheduling})
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(e.rc)
	if err != nil {
		t.Fatal(err)
	}
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "podgroups.scheduling.x-k8s.io"},
		"spec": map[string]any{
			"group": "scheduling.x-k8s.io", "scope": "Namespaced",
			"names": map[string]any{"plural": "podgroups", "singular": "podgroup", "kind": "PodGroup", "listKind": "PodGroupList"},
			"versions": []any{map[string]any{"name": "v1alpha1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
	if _, err := dyn.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("install the PodGroup CRD: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = dyn.Resource(crdGVR).Delete(ctx, "podgroups.scheduling.x-k8s.io", metav1.DeleteOptions{})
		// Wait until it is gone, so that a later run finds it missing.
		for ctx.Err() == nil {
			if _, err := dyn.Resource(crdGVR).Get(ctx, "podgroups.scheduling.x-k8s.io", metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	c := e.connector()
	id := fmt.Sprintf("d-pg%d", time.Now().UnixNano())
	// The hub admitted 1 of a's 1..2 replicas (elastic): 1 runs, and the
	// gang is whole with 1 of a and 2 of b.
	d := makeDispatch(id).PodSet("a", 2, 1000).MinReplicas(1).PodSet("b", 2, 1000).Admitted("a", 1).Obj()
	// Discovery may lag the CRD by a moment.
	var launchErr error
	eventually(t, 20*time.Second, "Launch to find the PodGroup CRD", func() bool {
		launchErr = c.Launch(ctx, d)
		return launchErr == nil
	})
	pgs := dyn.Resource(PodGroupGVR).Namespace(e.ns)
	pg, err := pgs.Get(ctx, JobName(id, "gang"), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("PodGroup: %v", err)
	}
	if mm, _, _ := unstructured.NestedInt64(pg.Object, "spec", "minMember"); mm != 3 {
		t.Fatalf("minMember %d, want 3 (the 1 admitted of a + 2 of b)", mm)
	}
	if pg.GetLabels()[LabelManagedBy] != ManagedByValue || pg.GetLabels()[LabelCluster] != e.cfg.ClusterID {
		t.Fatalf("PodGroup labels %v", pg.GetLabels())
	}
	jobs := e.jobsOf(id)
	if len(jobs) != 2 {
		t.Fatalf("%d jobs", len(jobs))
	}
	for _, j := range jobs {
		want := int32(2)
		if j.Labels[LabelPodSet] == "a" {
			want = 1
		}
		if *j.Spec.Parallelism != want || *j.Spec.Completions != want {
			t.Fatalf("job %s: parallelism %d completions %d, want %d", j.Name, *j.Spec.Parallelism, *j.Spec.Completions, want)
		}
		ps := j.Spec.Template
		if ps.Labels[LabelPodGroup] != pg.GetName() || ps.Spec.SchedulerName != "scheduler-plugins-scheduler" {
			t.Fatalf("job %s: pod-group label %q scheduler %q", j.Name, ps.Labels[LabelPodGroup], ps.Spec.SchedulerName)
		}
	}
	if err := c.Cancel(ctx, id, false); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, id, agent.StateCancelled, 10*time.Second)
	if _, err := pgs.Get(ctx, pg.GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("PodGroup after Cancel: %v, want NotFound", err)
	}
	if jobs := e.jobsOf(id); len(jobs) != 0 {
		t.Fatalf("%d jobs after Cancel", len(jobs))
	}
}

// TestK8sAPIServerOutage freezes the local kube-apiserver (SIGSTOP, then
// SIGCONT; it is the process scripts/k8s-up.sh started) while a dispatch
// runs. During the outage the inventory still answers from the informer
// caches and Launch fails as a fault to retry, not a rejection; the
// running work gets no terminal event. After it the connector recovers:
// the retried Launch succeeds and runs. Not parallel: it stalls the shared
// control plane.
func TestK8sAPIServerOutage(t *testing.T) {
	e := newEnv(t, Config{})
	c := e.connector()
	ctx := context.Background()
	dir := k8slocal.StateDir()
	raw, err := os.ReadFile(filepath.Join(dir, "pids", "kube-apiserver"))
	if err != nil {
		t.Fatalf("apiserver pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatalf("apiserver pid %q: %v", raw, err)
	}
	proc, err := os.FindProcess(pid)
	if err != nil {
		t.Fatal(err)
	}
	running := fmt.Sprintf("d-out-a%d", time.Now().UnixNano())
	if err := c.Launch(ctx, makeDispatch(running).PodSet("w", 1, 0).Extra(kwokDelay("300s")).Obj()); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, running, agent.StateRunning, 60*time.Second)

	// Other test packages share this control plane and may run
	// scripts/k8s-up.sh meanwhile. The marker tells it the apiserver is
	// frozen on purpose, so it waits instead of restarting the control
	// plane (which would wake the apiserver up in the middle of the test).
	marker := filepath.Join(dir, "frozen")
	if err := os.WriteFile(marker, []byte(strconv.Itoa(pid)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		_ = os.Remove(marker)
		t.Fatalf("freeze the apiserver: %v", err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := proc.Signal(syscall.SIGCONT); err != nil {
				t.Errorf("resume the apiserver: %v", err)
			}
			_ = os.Remove(marker)
		}
	}
	t.Cleanup(resume)
	inv, err := c.Inventory(ctx)
	if err != nil || len(inv.Nodes) < 3 {
		t.Fatalf("inventory during the outage: %v nodes, %v (want it from the caches)", len(inv.Nodes), err)
	}
	second := fmt.Sprintf("d-out-b%d", time.Now().UnixNano())
	d2 := makeDispatch(second).PodSet("w", 1, 0).Extra(kwokDelay("1s")).Obj()
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	err = c.Launch(lctx, d2)
	cancel()
	if err == nil || agent.IsRejected(err) {
		t.Fatalf("Launch during the outage: %v, want a retryable fault", err)
	}
	select {
	case ev := <-c.Events():
		if ev.State.Terminal() {
			t.Fatalf("terminal event during the outage: %+v", ev)
		}
	case <-time.After(3 * time.Second):
	}
	resume()

	// The agent retries the dispatch; it now goes through and runs.
	eventually(t, 60*time.Second, "Launch to succeed after the outage", func() bool {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return c.Launch(lctx, d2) == nil
	})
	waitEvent(t, c, second, agent.StateSucceeded, 60*time.Second)
	if len(e.jobsOf(second)) != 1 {
		t.Fatal("the retried dispatch is not one Job")
	}
	ls, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ws := range ls {
		if ws.DispatchID == running && ws.State != agent.StateRunning {
			t.Fatalf("the work running through the outage is %s (%s)", ws.State, ws.Reason)
		}
	}
}
