package mixedspokes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"

	"github.com/meridian-gpu/meridian/connectors/kubernetes"
	"github.com/meridian-gpu/meridian/connectors/slurm"
	"github.com/meridian-gpu/meridian/internal/e2e/e2eutil"
	"github.com/meridian-gpu/meridian/internal/e2e/k8shub"
	"github.com/meridian-gpu/meridian/internal/e2e/slurmhub"
	"github.com/meridian-gpu/meridian/internal/k8slocal"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// The accelerator class both clusters offer: the local Slurm cluster has
// four nodes of 8 H100 (GRES gpu:h100, which the Slurm connector reports
// as this class), the local control plane two KWOK nodes of 8
// NVIDIA-H100-80GB-HBM3 (and one A100 MIG node the test does not use).
const h100 = "nvidia-h100-80gb"

// The two teams share one parent, so the hub's Fair Tree compares them.
const (
	parent = "fed"
	teamA  = "fed/team-a"
	teamB  = "fed/team-b"
	// Weights of the teams: A is owed three times B's share.
	weightA, weightB = 3, 1
)

// Each spoke carries a label that pins the few workloads that must run
// there; the contended workloads carry no selector.
const (
	selKey   = "scheduler"
	selSlurm = "slurm"
	selKube  = "kubernetes"
)

type fixture struct {
	h       *e2eutil.Hub
	slurm   *slurmhub.Local
	kube    clientset.Interface
	ns      string
	slurmID string
	kubeID  string
	dir     string // the Slurm jobs' working directory
	logBuf  *e2eutil.LogBuffer
	e2eutil.Workloads
}

// skipOrFail skips the test because a cluster it needs cannot run here, or
// fails it when MERIDIAN_REQUIRE_<part>=1 says that cluster must be there.
func skipOrFail(t *testing.T, parts []string, msg string) {
	t.Helper()
	var vars []string
	for _, p := range parts {
		v := "MERIDIAN_REQUIRE_" + p
		if os.Getenv(v) == "1" {
			t.Fatalf("%s=1 and %s", v, msg)
		}
		vars = append(vars, v+"=1")
	}
	t.Skipf("SKIPPING end-to-end test of a mixed Slurm and Kubernetes federation: %s (set %s to make this a failure)", msg, strings.Join(vars, " or "))
}

// start brings up both local clusters, a hub with authentication on, the
// teams' queues and one agent per cluster. Everything it starts is undone
// by t.Cleanup, last started first.
func start(t *testing.T) *fixture {
	t.Helper()
	both := []string{"SLURM", "K8S"}
	if testing.Short() {
		skipOrFail(t, both, "-short: not starting the Slurm daemons and the Kubernetes control plane")
	}
	if os.Geteuid() != 0 {
		skipOrFail(t, both, "not root: "+slurmhub.ErrNotRoot.Error()+"; "+k8slocal.ErrNotRoot.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// connectors/slurm's and slurmhub's tests use the same slurmctld and
	// may run at the same time under go test ./...
	lock, err := slurmhub.Lock(ctx, 4*time.Minute)
	if err != nil {
		t.Fatalf("wait for the Slurm test lock: %v", err)
	}
	t.Cleanup(func() { lock.Close() })
	local, err := slurmhub.Up(ctx)
	if err != nil {
		skipOrFail(t, []string{"SLURM"}, "the local Slurm cluster cannot start here: "+err.Error())
	}
	kl, err := k8slocal.Up(ctx, false, nil)
	if err != nil {
		skipOrFail(t, []string{"K8S"}, "the local Kubernetes control plane cannot start here: "+err.Error())
	}
	kube, err := clientset.NewForConfig(kl.REST)
	if err != nil {
		t.Fatalf("kubernetes client: %v", err)
	}

	pid := strconv.Itoa(os.Getpid())
	f := &fixture{slurm: local, kube: kube, ns: "mrd-mixed-" + pid, slurmID: "slurm-mixed-" + pid, kubeID: "k8s-mixed-" + pid,
		dir: t.TempDir(), logBuf: &e2eutil.LogBuffer{}}
	f.Workloads.Log = f.logBuf
	log := slog.New(slog.NewTextHandler(f.logBuf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if p := os.Getenv("MERIDIAN_E2E_LOG"); p != "" {
		t.Cleanup(func() { _ = os.WriteFile(p, []byte(f.logBuf.Tail(4<<20)), 0o644) })
	}

	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", f.ns, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = kube.CoreV1().Namespaces().Delete(ctx, f.ns, metav1.DeleteOptions{})
	})
	// Whatever the test leaves, no job of this run stays in Slurm.
	t.Cleanup(func() { f.scancelLeftovers(t) })

	h, err := e2eutil.StartHub(ctx, "hub-mixed-e2e", log)
	if err != nil {
		t.Fatalf("start the hub: %v", err)
	}
	t.Cleanup(h.Stop)
	f.h, f.Workloads.WL = h, h.WL

	for _, q := range []*meridianv1.Queue{
		{Path: parent, Weight: 1, Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: h100, NominalMilliGpus: 96000}}},
		{Path: teamA, Weight: weightA, Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: h100, NominalMilliGpus: 48000}}},
		{Path: teamB, Weight: weightB, Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: h100, NominalMilliGpus: 48000}}},
	} {
		if _, err := h.Q.CreateQueue(ctx, &meridianv1.CreateQueueRequest{Queue: q}); err != nil {
			t.Fatalf("create queue %s: %v", q.GetPath(), err)
		}
	}

	// The Slurm spoke.
	scfg := local.Config(f.slurmID)
	scfg.Labels = map[string]string{selKey: selSlurm}
	scfg.Logger = log.With("connector", "slurm")
	scfg.PollInterval = 200 * time.Millisecond
	sc, err := slurm.New(scfg)
	if err != nil {
		t.Fatalf("slurm connector: %v", err)
	}
	stopSlurm, err := h.StartAgent(ctx, f.slurmID, sc, log, true)
	if err != nil {
		sc.Close()
		t.Fatalf("slurm agent: %v", err)
	}
	t.Cleanup(func() { stopSlurm(); sc.Close() })

	// The Kubernetes spoke.
	kcfg := k8shub.ConnectorConfig(kl, f.kubeID, f.ns)
	kcfg.Labels = map[string]string{selKey: selKube}
	kcfg.Logger = log.With("connector", "kubernetes")
	kc, err := kubernetes.New(ctx, kcfg)
	if err != nil {
		t.Fatalf("kubernetes connector: %v", err)
	}
	stopKube, err := h.StartAgent(ctx, f.kubeID, kc, log, true)
	if err != nil {
		kc.Close()
		t.Fatalf("kubernetes agent: %v", err)
	}
	t.Cleanup(func() { stopKube(); kc.Close() })

	if err := e2eutil.WaitClusters(ctx, h.CL, 60*time.Second, f.slurmID, f.kubeID); err != nil {
		f.Failf(t, "%v", err)
	}
	// Both must offer the class the teams share.
	for _, id := range []string{f.slurmID, f.kubeID} {
		c, err := h.CL.GetCluster(ctx, &meridianv1.GetClusterRequest{Id: id})
		if err != nil {
			t.Fatalf("get cluster %s: %v", id, err)
		}
		var classes []string
		var total int64
		for _, cc := range c.GetCapacity() {
			classes = append(classes, cc.GetAcceleratorClass())
			if cc.GetAcceleratorClass() == h100 {
				total = cc.GetTotalMilli()
			}
		}
		if total < 8000 {
			t.Fatalf("cluster %s offers %d milli of %s (classes %v); the test needs it on both clusters", id, total, h100, classes)
		}
		t.Logf("cluster %s: %d %s GPUs (classes %v)", id, total/1000, h100, classes)
	}
	return f
}

// scancelLeftovers cancels any Slurm job of this run's Slurm spoke that is
// still known to Slurm (normally none: the test cancels its workloads
// through the hub and waits for them).
func (f *fixture) scancelLeftovers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	jobs, err := f.slurm.Jobs(ctx, f.slurmID)
	if err != nil {
		t.Logf("list leftover Slurm jobs: %v", err)
		return
	}
	var ids []string
	for _, j := range jobs {
		switch j.State {
		case "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED":
			ids = append(ids, strconv.FormatInt(j.ID, 10))
		}
	}
	if len(ids) == 0 {
		return
	}
	t.Logf("cancelling %d Slurm jobs the run left behind", len(ids))
	if out, err := f.slurm.Command(ctx, "scancel", ids...).CombinedOutput(); err != nil {
		t.Logf("scancel: %v: %s", err, out)
	}
}

// workload is one 4-GPU H100 replica that runs for run on either cluster:
// the Slurm template's script sleeps, and KWOK completes the pod after run
// (the Kubernetes connector runs its default image for a workload without
// a container template). sel pins it to one cluster; nil leaves the choice
// to the hub.
func (f *fixture) workload(t *testing.T, name, queue string, run time.Duration, sel map[string]string) *meridianv1.Workload {
	t.Helper()
	extra, err := structpb.NewStruct(k8shub.RunFor(run))
	if err != nil {
		t.Fatal(err)
	}
	return &meridianv1.Workload{
		Name: name, Queue: queue, ClusterSelector: sel,
		PodSets: []*meridianv1.PodSet{{Name: "main", Replicas: 1,
			Resources: &meridianv1.Resources{GpuMilli: 4000, AcceleratorClass: h100}}},
		Runtime: &meridianv1.RuntimeTemplate{
			Kind: &meridianv1.RuntimeTemplate_Slurm{Slurm: &meridianv1.SlurmTemplate{
				Script:  fmt.Sprintf("#!/bin/bash\nsleep %d\n", int(run.Seconds())),
				Workdir: f.dir, TimeLimit: durationpb.New(5 * time.Minute)}},
			Extra: extra,
		},
	}
}

// usage is what the hub's ledger holds for one queue, through the API.
type usage struct {
	gpuSeconds float64 // decayed GPU-seconds
	fairshare  float64
	pending    int32
	running    int32
}

func (f *fixture) queueUsage(t *testing.T, path string) usage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q, err := f.h.Q.GetQueue(ctx, &meridianv1.GetQueueRequest{Path: path})
	if err != nil {
		t.Fatalf("get queue %s: %v", path, err)
	}
	st := q.GetStatus()
	u := usage{pending: st.GetPendingWorkloads(), running: st.GetRunningWorkloads()}
	for _, c := range st.GetClasses() {
		// The ledger is per queue: every class entry carries the same
		// total.
		u.gpuSeconds, u.fairshare = c.GetDecayedGpuSeconds(), c.GetFairshareFactor()
	}
	return u
}

// waitUsage polls both teams' usage until cond holds, for at most limit.
func (f *fixture) waitUsage(t *testing.T, what string, limit time.Duration, cond func(a, b usage) bool) (usage, usage) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		a, b := f.queueUsage(t, teamA), f.queueUsage(t, teamB)
		if cond(a, b) {
			return a, b
		}
		if time.Now().After(deadline) {
			f.Failf(t, "%s: not reached within %s (team-a %+v, team-b %+v)", what, limit, a, b)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// all lists every workload of the teams.
func (f *fixture) all(t *testing.T) []*meridianv1.Workload {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []*meridianv1.Workload
	req := &meridianv1.ListWorkloadsRequest{Queue: parent, PageSize: 1000}
	for {
		resp, err := f.h.WL.ListWorkloads(ctx, req)
		if err != nil {
			t.Fatalf("list workloads: %v", err)
		}
		out = append(out, resp.GetWorkloads()...)
		if resp.GetNextPageToken() == "" {
			return out
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

// cancelAll cancels every workload of the teams that has not finished and
// waits until all have, so that nothing keeps running on either cluster.
func (f *fixture) cancelAll(t *testing.T, limit time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for {
		open := 0
		for _, w := range f.all(t) {
			if e2eutil.TerminalPhase(w.GetStatus().GetPhase()) {
				continue
			}
			open++
			if _, err := f.h.WL.CancelWorkload(ctx, &meridianv1.CancelWorkloadRequest{Id: w.GetId(), Reason: "end of the test"}); err != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Logf("cancel %s: %v", w.GetId(), err)
			}
		}
		if open == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Errorf("%d workloads still not finished %s after they were cancelled", open, limit)
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}
