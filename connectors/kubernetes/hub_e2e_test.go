package kubernetes

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meridian-gpu/meridian/hub/server"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// logBuffer keeps the hub's and agent's logs for a failing test.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.b.String()
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}

// TestK8sHubEndToEnd runs one hub (embedded etcd and NATS) and one agent
// with this connector on the local kube-apiserver: a 2 x 4-GPU gang
// submitted to the hub becomes an Indexed Job whose pods KWOK runs, and the
// hub sees it Running, then Succeeded; cancelling a long one from the hub
// deletes its Job.
func TestK8sHubEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{Labels: map[string]string{"e2e": "k8s"}})
	logs := &logBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	e.cfg.Logger = log.With("connector", "kubernetes")
	dump := func() string { return "\n--- hub and agent log (tail) ---\n" + logs.tail(5000) }

	dir := t.TempDir()
	hub, err := server.New(server.Config{DataDir: dir, HubID: "hub-k8s-e2e", Version: "e2e", UnsafeNoFsync: true,
		LeaderTTL: time.Second, SchedulePeriod: 100 * time.Millisecond, Logger: log.With("part", "hub")})
	if err != nil {
		t.Fatalf("start the hub: %v", err)
	}
	hctx, hcancel := context.WithCancel(context.Background())
	hdone := make(chan error, 1)
	go func() { hdone <- hub.Run(hctx) }()
	t.Cleanup(func() {
		hcancel()
		select {
		case <-hdone:
		case <-time.After(15 * time.Second):
		}
		_ = hub.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	eventually(t, 30*time.Second, "the hub's /readyz", func() bool {
		resp, err := http.Get("http://" + hub.Addrs().HTTP + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	conn, err := grpc.NewClient(hub.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	wl, cl := meridianv1.NewWorkloadServiceClient(conn), meridianv1.NewClusterServiceClient(conn)
	q := &meridianv1.Queue{Path: "e2e", Weight: 1, Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: "nvidia-h100-80gb", NominalMilliGpus: 64000}}}
	if _, err := meridianv1.NewQueueServiceClient(conn).CreateQueue(ctx, &meridianv1.CreateQueueRequest{Queue: q}); err != nil {
		t.Fatalf("create queue: %v", err)
	}

	// The agent, with this connector.
	clusterID := fmt.Sprintf("k8s-e2e-%d", os.Getpid())
	e.cfg.ClusterID = clusterID
	c := e.connector()
	bus, err := natsbus.Connect(ctx, hub.NATSURL(), natsbus.WithName("e2e-agent-k8s"))
	if err != nil {
		t.Fatalf("agent: connect to NATS: %v", err)
	}
	a, err := agent.New(agent.Config{ClusterID: clusterID, Bus: bus, Connector: c, Logger: log.With("agent", clusterID), Version: "e2e",
		HeartbeatInterval: 300 * time.Millisecond, AdvertiseInterval: time.Second, ChangeDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	actx, acancel := context.WithCancel(context.Background())
	adone := make(chan error, 1)
	go func() { adone <- a.Run(actx) }()
	t.Cleanup(func() {
		acancel()
		select {
		case <-adone:
		case <-time.After(10 * time.Second):
		}
		bus.Close()
	})
	eventually(t, 30*time.Second, "the Kubernetes spoke to be READY with capacity", func() bool {
		resp, err := cl.ListClusters(ctx, &meridianv1.ListClustersRequest{})
		if err != nil {
			return false
		}
		for _, cs := range resp.GetClusters() {
			if cs.GetId() == clusterID && cs.GetState() == meridianv1.ClusterState_CLUSTER_STATE_READY && len(cs.GetCapacity()) > 0 {
				return true
			}
		}
		return false
	})

	submit := func(name, delay string, replicas, milli int32) string {
		t.Helper()
		extra, err := structpb.NewStruct(kwokDelay(delay))
		if err != nil {
			t.Fatal(err)
		}
		w := &meridianv1.Workload{Name: name, Queue: "e2e", ClusterSelector: map[string]string{"e2e": "k8s"},
			PodSets: []*meridianv1.PodSet{{Name: "workers", Replicas: replicas,
				Resources: &meridianv1.Resources{GpuMilli: milli, AcceleratorClass: "nvidia-h100-80gb"}}},
			Runtime: &meridianv1.RuntimeTemplate{Kind: &meridianv1.RuntimeTemplate_Container{Container: &meridianv1.ContainerTemplate{Image: "trainer:1", Command: []string{"train"}}},
				Extra: extra}}
		resp, err := wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: w})
		if err != nil {
			t.Fatalf("submit %s: %v", name, err)
		}
		return resp.GetWorkload().GetId()
	}
	waitPhase := func(id string, want meridianv1.WorkloadPhase, within time.Duration) *meridianv1.Workload {
		t.Helper()
		var w *meridianv1.Workload
		for end := time.Now().Add(within); ; time.Sleep(100 * time.Millisecond) {
			var err error
			w, err = wl.GetWorkload(ctx, &meridianv1.GetWorkloadRequest{Id: id})
			if err != nil {
				t.Fatalf("get %s: %v", id, err)
			}
			p := w.GetStatus().GetPhase()
			if p == want {
				return w
			}
			if p >= meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED && p != want {
				t.Fatalf("workload %s is %s (%q), want %s%s", id, p, w.GetStatus().GetMessage(), want, dump())
			}
			if time.Now().After(end) {
				t.Fatalf("workload %s still %s after %s (pending reason %q), want %s%s", id, p, within, w.GetStatus().GetPendingReason(), want, dump())
			}
		}
	}

	gang := submit("k8s-gang", "3s", 2, 4000)
	w := waitPhase(gang, meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING, 60*time.Second)
	if w.GetStatus().GetCluster() != clusterID {
		t.Fatalf("gang runs on %q, want %q", w.GetStatus().GetCluster(), clusterID)
	}
	did := w.GetStatus().GetDispatchId()
	jobs := e.jobsOf(did)
	if len(jobs) != 1 || *jobs[0].Spec.Parallelism != 2 || *jobs[0].Spec.Completions != 2 || jobs[0].Spec.Template.Spec.Containers[0].Image != "trainer:1" {
		t.Fatalf("dispatch %s: %d jobs, want one 2-replica Indexed Job with the workload's container", did, len(jobs))
	}
	if jobs[0].Annotations[AnnWorkloadID] != gang {
		t.Fatalf("job annotated with workload %q, want %q", jobs[0].Annotations[AnnWorkloadID], gang)
	}
	w = waitPhase(gang, meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED, 60*time.Second)
	if w.GetStatus().ExitCode == nil || w.GetStatus().GetExitCode() != 0 {
		t.Fatalf("gang succeeded with exit %v", w.GetStatus().ExitCode)
	}

	long := submit("k8s-long", "120s", 1, 1000)
	w = waitPhase(long, meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING, 60*time.Second)
	did = w.GetStatus().GetDispatchId()
	if _, err := wl.CancelWorkload(ctx, &meridianv1.CancelWorkloadRequest{Id: long}); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	waitPhase(long, meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED, 30*time.Second)
	eventually(t, 30*time.Second, "the cancelled workload's Job to be deleted", func() bool { return len(e.jobsOf(did)) == 0 })
	if l, err := e.kube.BatchV1().Jobs(e.ns).List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 1 {
		t.Fatalf("jobs left in the namespace: %v (want only the finished gang's)", err)
	}
}
