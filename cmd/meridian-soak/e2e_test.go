package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"

	"github.com/meridian-gpu/meridian/connectors/simcluster"
	"github.com/meridian-gpu/meridian/internal/soak/topology"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// childEnv makes this test binary act as meridian-soak (etcd-member,
// nats-node) when the topology starts it as a child.
const childEnv = "MERIDIAN_SOAK_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		ctx, stop := signalContext()
		defer stop()
		if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
			fmt.Fprintf(os.Stderr, "meridian-soak: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testBinaries builds meridian-hub and meridian-agent for the test, or takes
// them from MERIDIAN_SOAK_BIN_DIR when set (a faster rerun).
func testBinaries(t *testing.T) (hub, agent string) {
	t.Helper()
	dir := os.Getenv("MERIDIAN_SOAK_BIN_DIR")
	if dir == "" {
		dir = t.TempDir()
		t0 := time.Now()
		out, err := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "../meridian-hub", "../meridian-agent").CombinedOutput()
		if err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		t.Logf("built meridian-hub and meridian-agent in %s", time.Since(t0).Round(time.Millisecond))
	}
	return filepath.Join(dir, "meridian-hub"), filepath.Join(dir, "meridian-agent")
}

// TestProductionTopologySurvivesKills brings up the production shape as
// processes (3 etcd members, 3 NATS nodes, 2 hubs, 2 agents), runs 50
// workloads through it, then SIGKILLs the leader hub, then a NATS node
// and the etcd leader, and after each sees new work dispatched and
// finished.
func TestProductionTopologySurvivesKills(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 10 processes; not with -short")
	}
	hubBin, agentBin := testBinaries(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var progress strings.Builder
	top, err := topology.Up(ctx, topology.Config{
		Dir: dir, HubBin: hubBin, AgentBin: agentBin, SoakBin: self, SoakEnv: []string{childEnv + "=1"},
		Hubs: 2, Agents: 2, LeaderTTL: 2 * time.Second, SchedulePeriod: 200 * time.Millisecond,
		Progress: &progress, ReadyTimeout: 45 * time.Second,
	})
	if err != nil {
		t.Fatalf("up: %v\n%s", err, progress.String())
	}
	t.Cleanup(top.Close)
	f := &fixture{t: t, top: top}
	t.Cleanup(f.dumpLogsOnFailure)
	t.Log(progress.String())

	f.checkStreamsR3(ctx)
	f.createQueues(ctx)

	ids := f.submit(ctx, "first", 50)
	f.waitSucceeded(ctx, ids, 60*time.Second)

	// The leader hub crashes; the other takes over and dispatches.
	old, err := top.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Proc.Kill(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	ids = f.submit(ctx, "after-hub-kill", 10)
	f.waitSucceeded(ctx, ids, 60*time.Second)
	now, err := top.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if now.ID == old.ID {
		t.Fatalf("leader is still %s after it was killed", old.ID)
	}
	t.Logf("leader %s killed; %s leads and finished 10 new workloads %s later", old.ID, now.ID, time.Since(t0).Round(time.Millisecond))

	// A NATS node and the etcd leader crash; work still flows.
	el, err := top.EtcdLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nn := top.NATS[0]
	if err := nn.Proc.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := el.Proc.Kill(); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	ids = f.submit(ctx, "after-nats-etcd-kill", 10)
	f.waitSucceeded(ctx, ids, 60*time.Second)
	t.Logf("NATS node %s and etcd leader %s killed; 10 new workloads finished %s later", nn.Name, el.Name, time.Since(t0).Round(time.Millisecond))
	for _, a := range top.Agents {
		if !a.Proc.Running() {
			t.Errorf("agent %s exited", a.ClusterID)
		}
	}
}

type fixture struct {
	t   *testing.T
	top *topology.Topology
}

// dumpLogsOnFailure prints the tail of every child's log when the test
// failed.
func (f *fixture) dumpLogsOnFailure() {
	if !f.t.Failed() {
		return
	}
	for _, n := range f.top.Group.Names() {
		f.t.Logf("--- %s (tail) ---\n%s", n, f.top.Group.Get(n).LogTail(3000))
	}
}

// conn dials a hub that runs.
func (f *fixture) conn() *grpc.ClientConn {
	f.t.Helper()
	h := f.top.LiveHub()
	if h == nil {
		f.t.Fatal("no hub runs")
	}
	c, err := f.top.Dial(h)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close() })
	return c
}

// retry calls op until it succeeds or 30 s pass: a hub or store that was
// just killed makes calls fail for a moment.
func (f *fixture) retry(ctx context.Context, what string, op func(ctx context.Context, c *grpc.ClientConn) error) {
	f.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c := f.conn()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := op(cctx, c)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (f *fixture) checkStreamsR3(ctx context.Context) {
	f.t.Helper()
	nc, err := nats.Connect(f.top.NATSURLs())
	if err != nil {
		f.t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, name := range []string{natsbus.StreamDispatch, natsbus.StreamEvents, natsbus.StreamAdvert} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			f.t.Fatalf("stream %s: %v", name, err)
		}
		if r := st.CachedInfo().Config.Replicas; r != 3 {
			f.t.Fatalf("stream %s has %d replicas, want 3", name, r)
		}
	}
}

func (f *fixture) createQueues(ctx context.Context) {
	f.t.Helper()
	gpus := int64(64 * len(f.top.Agents))
	for _, q := range []*meridianv1.Queue{
		{Path: "soak", Weight: 1, Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: "nvidia-h100-80gb", NominalMilliGpus: gpus * 1000}}},
		{Path: "soak/load", Weight: 1, Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: "*"}}},
	} {
		f.retry(ctx, "create queue "+q.Path, func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := meridianv1.NewQueueServiceClient(c).CreateQueue(ctx, &meridianv1.CreateQueueRequest{Queue: q})
			return err
		})
	}
}

// submit submits n one-GPU workloads that run one second, with
// idempotency keys, so a retried submit is the same workload.
func (f *fixture) submit(ctx context.Context, batch string, n int) []string {
	f.t.Helper()
	var ids []string
	for i := range n {
		w := &meridianv1.Workload{
			Name: fmt.Sprintf("%s-%03d", batch, i), Queue: "soak/load", IdempotencyKey: fmt.Sprintf("%s-%d", batch, i),
			Labels: map[string]string{simcluster.LabelDuration: "1s"},
			PodSets: []*meridianv1.PodSet{{Name: "main", Replicas: 1, Resources: &meridianv1.Resources{
				GpuMilli: 1000, CpuMilli: 1000, MemoryMib: 1024, AcceleratorClass: "nvidia-h100-80gb"}}},
		}
		f.retry(ctx, "submit "+w.Name, func(ctx context.Context, c *grpc.ClientConn) error {
			resp, err := meridianv1.NewWorkloadServiceClient(c).SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: w})
			if err == nil {
				ids = append(ids, resp.GetWorkload().GetId())
			}
			return err
		})
	}
	return ids
}

// waitSucceeded waits until every workload has succeeded; any other end,
// or the limit, fails the test.
func (f *fixture) waitSucceeded(ctx context.Context, ids []string, limit time.Duration) {
	f.t.Helper()
	pending := map[string]string{} // id -> last phase and reason
	for _, id := range ids {
		pending[id] = "not read yet"
	}
	deadline := time.Now().Add(limit)
	for len(pending) > 0 {
		c := f.conn()
		wl := meridianv1.NewWorkloadServiceClient(c)
		for id := range pending {
			gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			w, err := wl.GetWorkload(gctx, &meridianv1.GetWorkloadRequest{Id: id})
			cancel()
			if err != nil {
				pending[id] = "get: " + err.Error()
				break // this hub may have just died: dial again
			}
			switch p := w.GetStatus().GetPhase(); p {
			case meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED:
				delete(pending, id)
			case meridianv1.WorkloadPhase_WORKLOAD_PHASE_FAILED, meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED:
				f.t.Fatalf("workload %s (%s) ended %s: %q", id, w.GetName(), p, w.GetStatus().GetMessage())
			default:
				pending[id] = fmt.Sprintf("%s (%s)", p, w.GetStatus().GetPendingReason())
			}
		}
		if len(pending) == 0 {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%d of %d workloads not SUCCEEDED after %s, e.g. %v", len(pending), len(ids), limit, sample(pending, 5))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func sample(m map[string]string, n int) []string {
	var out []string
	for id, s := range m {
		if len(out) == n {
			break
		}
		out = append(out, id+": "+s)
	}
	return out
}
