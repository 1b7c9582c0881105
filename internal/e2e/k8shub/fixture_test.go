package k8shub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/meridian-gpu/meridian/connectors/kubernetes"
	"github.com/meridian-gpu/meridian/connectors/simcluster"
	"github.com/meridian-gpu/meridian/hub/server"
	"github.com/meridian-gpu/meridian/internal/e2e/e2eutil"
	"github.com/meridian-gpu/meridian/internal/k8slocal"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// The fixture is one hub (embedded etcd and NATS, the scheduling loop,
// gRPC) with two spokes, a mixed fleet: the local Kubernetes control plane
// behind a real agent and the Kubernetes connector (its Jobs in a
// namespace of this test binary), and a simulated 6 x 4 A100-40GB
// cluster. The two share no accelerator class, so where a workload runs
// is decided by its class alone (TestFractionalModesThroughTheHub adds
// four Kubernetes spokes of its own for its run). All tests of the package
// share the fixture; TestMain stops it and deletes the namespace.

const (
	h100     = "nvidia-h100-80gb" // only on the KWOK nodes gpu-h100-0/1
	a100k8s  = "nvidia-a100-80gb" // only on the KWOK node gpu-a100-mig
	a100sim  = "nvidia-a100-40gb" // only on the simulated cluster
	simID    = "sim-eu"
	queue    = "e2e"
	image    = "busybox:1.37"
	nodeH0   = "gpu-h100-0"
	nodeH1   = "gpu-h100-1"
	nodeA100 = "gpu-a100-mig"
)

type fixture struct {
	local             *k8slocal.Local
	kube              clientset.Interface
	ns                string
	k8sID             string
	hub               *server.Server
	h                 *e2eutil.Hub
	hubStop           func()
	grpcAdr           string
	conn              *grpc.ClientConn
	wl                meridianv1.WorkloadServiceClient
	cl                meridianv1.ClusterServiceClient
	q                 meridianv1.QueueServiceClient
	log               *slog.Logger
	logBuf            *e2eutil.LogBuffer
	e2eutil.Workloads          // Submit, Get, WaitPhase, Failf
	stops             []func() // in start order; close runs them backwards
}

var (
	shared = &e2eutil.Shared[fixture]{Part: "K8S", What: "end-to-end Kubernetes test", Component: "the local Kubernetes control plane and a hub", NotRoot: k8slocal.ErrNotRoot, Start: start}
)

// TestMain stops the shared fixture; with MERIDIAN_E2E_LOG=<file> it also
// writes the hub's, agents' and connector's logs there.
func TestMain(m *testing.M) {
	code := m.Run()
	if fix := shared.Started(); fix != nil {
		fix.close()
		fix.logBuf.WriteOnExit()
	}
	os.Exit(code)
}

func skipOrFail(t testing.TB, msg string) {
	t.Helper()
	e2eutil.SkipOrFail(t, shared.Part, shared.What, msg)
}

// need returns the shared fixture, starting it on first use (see
// e2eutil.Shared for when it skips or fails).
func need(t testing.TB) *fixture {
	t.Helper()
	return shared.Need(t)
}

func start() (*fixture, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	local, err := k8slocal.Up(ctx, false, nil)
	if err != nil {
		return nil, err
	}
	kube, err := clientset.NewForConfig(local.REST)
	if err != nil {
		return nil, err
	}
	f := &fixture{local: local, kube: kube, logBuf: &e2eutil.LogBuffer{},
		ns: fmt.Sprintf("mrd-k8shub-%d", os.Getpid()), k8sID: fmt.Sprintf("k8s-e2e-%d", os.Getpid())}
	f.Workloads.Log = f.logBuf
	f.log = slog.New(slog.NewTextHandler(f.logBuf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// From here on a failure is the fixture's fault, not a missing control
	// plane: return f with the error so the test fails.
	fail := func(err error) (*fixture, error) { return f, err }
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}, metav1.CreateOptions{}); err != nil {
		return fail(fmt.Errorf("create namespace %s: %w", f.ns, err))
	}
	f.stops = append(f.stops, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = kube.CoreV1().Namespaces().Delete(ctx, f.ns, metav1.DeleteOptions{})
	})

	h, err := e2eutil.StartHub(ctx, "hub-k8s-e2e", f.log)
	if err != nil {
		return fail(err)
	}
	f.h, f.hub, f.hubStop, f.grpcAdr = h, h.Server, h.Stop, h.GRPC
	f.conn, f.wl, f.cl, f.q = h.Conn, h.WL, h.CL, h.Q
	f.Workloads.WL = f.wl
	q := &meridianv1.Queue{Path: queue, Weight: 1}
	for _, class := range []string{h100, a100k8s, a100sim} {
		q.Quotas = append(q.Quotas, &meridianv1.QueueQuota{AcceleratorClass: class, NominalMilliGpus: 64000})
	}
	if _, err := f.q.CreateQueue(ctx, &meridianv1.CreateQueueRequest{Queue: q}); err != nil {
		return fail(fmt.Errorf("create queue %s: %w", queue, err))
	}

	// The Kubernetes spoke.
	stop, err := f.startKubeSpoke(ctx, f.k8sID, map[string]string{"scheduler": "kubernetes"}, nil)
	if err != nil {
		return fail(err)
	}
	f.stops = append(f.stops, stop)

	// The simulated spoke.
	scfg, err := simcluster.Example("a100-fractional")
	if err != nil {
		return fail(err)
	}
	sim, err := simcluster.New(scfg, simcluster.Options{DefaultDuration: time.Second, Logger: f.log.With("cluster", simID)})
	if err != nil {
		return fail(err)
	}
	f.stops = append(f.stops, sim.Close)
	if stop, err = f.startAgent(ctx, simID, sim); err != nil {
		return fail(err)
	}
	f.stops = append(f.stops, stop)
	if err := f.waitClusters(ctx, 60*time.Second, f.k8sID, simID); err != nil {
		return fail(err)
	}
	return f, nil
}

// startKubeSpoke starts a Kubernetes connector on the local control plane
// (its Jobs in the fixture's namespace, its objects labelled with id) and
// an agent for it; stop stops the agent, then the connector.
func (f *fixture) startKubeSpoke(ctx context.Context, id string, labels map[string]string, modes []string) (stop func(), err error) {
	cfg := ConnectorConfig(f.local, id, f.ns)
	cfg.Labels = labels
	cfg.FractionalModes = modes
	cfg.Logger = f.log.With("connector", "kubernetes", "cluster", id)
	kc, err := kubernetes.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes connector %s: %w", id, err)
	}
	stopAgent, err := f.startAgent(ctx, id, kc)
	if err != nil {
		kc.Close()
		return nil, err
	}
	return func() { stopAgent(); kc.Close() }, nil
}

func (f *fixture) startAgent(ctx context.Context, id string, conn agent.Connector) (func(), error) {
	return f.h.StartAgent(ctx, id, conn, f.log, true)
}

func (f *fixture) close() {
	// The agents stop before their connectors, the hub after the agents,
	// the namespace goes last.
	for i := len(f.stops) - 1; i >= 1; i-- {
		f.stops[i]()
	}
	if f.hubStop != nil {
		f.hubStop() // closes f.conn too
	}
	if len(f.stops) > 0 {
		f.stops[0]()
	}
}

// waitClusters waits until every id is READY and advertises capacity.
func (f *fixture) waitClusters(ctx context.Context, limit time.Duration, ids ...string) error {
	return e2eutil.WaitClusters(ctx, f.cl, limit, ids...)
}

// ---- workloads ---------------------------------------------------------------

// k8sWorkload is replicas x milli GPUs of class in a container whose pods
// KWOK keeps Running for run.
func k8sWorkload(t *testing.T, name string, replicas, milli int32, class string, run time.Duration) *meridianv1.Workload {
	t.Helper()
	extra, err := structpb.NewStruct(RunFor(run))
	if err != nil {
		t.Fatal(err)
	}
	return &meridianv1.Workload{
		Name: name, Queue: queue,
		PodSets: []*meridianv1.PodSet{{Name: "main", Replicas: replicas,
			Resources: &meridianv1.Resources{GpuMilli: milli, AcceleratorClass: class}}},
		Runtime: &meridianv1.RuntimeTemplate{
			Kind: &meridianv1.RuntimeTemplate_Container{Container: &meridianv1.ContainerTemplate{
				Image: image, Command: []string{"sh", "-c", "echo " + name}}},
			Extra: extra,
		},
	}
}

// simWorkload is replicas x milli GPUs of class that runs for run on the
// simulated cluster.
func simWorkload(name string, replicas, milli int32, class string, run time.Duration) *meridianv1.Workload {
	return &meridianv1.Workload{
		Name: name, Queue: queue, Labels: map[string]string{simcluster.LabelDuration: run.String()},
		PodSets: []*meridianv1.PodSet{{Name: "main", Replicas: replicas,
			Resources: &meridianv1.Resources{GpuMilli: milli, AcceleratorClass: class}}},
	}
}

// eventually polls cond until it holds, failing after limit.
func (f *fixture) eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(limit); ; time.Sleep(200 * time.Millisecond) {
		if cond() {
			return
		}
		if time.Now().After(end) {
			f.Failf(t, "timed out after %s waiting for %s", limit, what)
		}
	}
}

// jobsOf lists the dispatch's Jobs from the apiserver, those being
// deleted included (the connector's cluster-id label, then the exact
// dispatch id of its annotation).
func (f *fixture) jobsOf(t *testing.T, dispatchID string) []batchv1.Job {
	t.Helper()
	return f.clusterJobs(t, f.k8sID, dispatchID)
}

// clusterJobs is jobsOf for the Kubernetes spoke cluster (the fractional
// spokes share the namespace; the cluster-id label tells them apart).
func (f *fixture) clusterJobs(t *testing.T, cluster, dispatchID string) []batchv1.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := f.kube.BatchV1().Jobs(f.ns).List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelCluster + "=" + cluster})
	if err != nil {
		t.Fatalf("list jobs of %s: %v", dispatchID, err)
	}
	var out []batchv1.Job
	for _, j := range l.Items {
		if j.Annotations[kubernetes.AnnDispatchID] == dispatchID {
			out = append(out, j)
		}
	}
	return out
}

// podsOf lists the dispatch's pods from the apiserver, those being deleted
// included.
func (f *fixture) podsOf(t *testing.T, dispatchID string) []corev1.Pod {
	t.Helper()
	return f.clusterPods(t, f.k8sID, dispatchID)
}

// clusterPods is podsOf for the Kubernetes spoke cluster.
func (f *fixture) clusterPods(t *testing.T, cluster, dispatchID string) []corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := f.kube.CoreV1().Pods(f.ns).List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelCluster + "=" + cluster})
	if err != nil {
		t.Fatalf("list pods of %s: %v", dispatchID, err)
	}
	var out []corev1.Pod
	for _, p := range l.Items {
		if p.Annotations[kubernetes.AnnDispatchID] == dispatchID {
			out = append(out, p)
		}
	}
	return out
}

// queueUsage is the queue's GPU milli in use per class and its running
// workloads, as the hub reports them.
func (f *fixture) queueUsage(t *testing.T) (map[string]int64, int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q, err := f.q.GetQueue(ctx, &meridianv1.GetQueueRequest{Path: queue})
	if err != nil {
		t.Fatalf("get queue %s: %v", queue, err)
	}
	out := map[string]int64{}
	for _, c := range q.GetStatus().GetClasses() {
		out[c.GetAcceleratorClass()] = c.GetUsageMilli()
	}
	return out, q.GetStatus().GetRunningWorkloads()
}

var errNoCondition = errors.New("no condition")

// jobCondition is the status of the Job's condition typ.
func jobCondition(j *batchv1.Job, typ batchv1.JobConditionType) (corev1.ConditionStatus, error) {
	for _, c := range j.Status.Conditions {
		if c.Type == typ {
			return c.Status, nil
		}
	}
	return "", errNoCondition
}

// failPod makes the pod fail as a crashed container would: KWOK always
// completes a pod with exit 0 (its stages have no failure), so the test
// writes the status the kubelet would, phase Failed with the container
// terminated by exit code, retrying when KWOK updates the pod meanwhile.
func (f *fixture) failPod(t *testing.T, name string, exitCode int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := f.kube.CoreV1().Pods(f.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		p.Status.Phase = corev1.PodFailed
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: p.Spec.Containers[0].Name, Image: p.Spec.Containers[0].Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: exitCode, Reason: "Error", StartedAt: now, FinishedAt: now}}}}
		_, err = f.kube.CoreV1().Pods(f.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("fail pod %s: %v", name, err)
	}
}
