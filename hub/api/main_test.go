package api

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meridian-gpu/meridian/hub/store"
	"github.com/meridian-gpu/meridian/internal/cancelfold"
	embedetcd "github.com/meridian-gpu/meridian/internal/embedded/etcd"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

var etcdSrv *embedetcd.Server

func TestMain(m *testing.M) {
	var stop func()
	var err error
	if etcdSrv, stop, err = embedetcd.StartTemp("api-etcd-"); err != nil {
		fmt.Fprintln(os.Stderr, "start embedded etcd:", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

// env is one API server (gRPC and REST) over the shared embedded etcd.
type env struct {
	svc      *Service
	st       *store.Store
	cli      *clientv3.Client
	cache    *store.Cache
	conn     *grpc.ClientConn
	wl       meridianv1.WorkloadServiceClient
	qs       meridianv1.QueueServiceClient
	cs       meridianv1.ClusterServiceClient
	admin    meridianv1.AdminServiceClient
	base     string // REST base URL
	grpcAddr string
}

type envOpt func(*Deps)

// withoutLoop leaves cancel requests unanswered, as in a federation with
// no leader, and bounds CancelWorkload's wait at 150ms. newEnv otherwise
// runs cancelfold beside the API, in the loop's place.
func withoutLoop(d *Deps) { d.CancelWait = 150 * time.Millisecond }

func newEnv(t testing.TB, opts ...envOpt) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cli, err := etcdSrv.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	st, err := store.New(cli, store.Options{MaxTxnOps: etcdSrv.MaxTxnOps()})
	if err != nil {
		t.Fatal(err)
	}
	cache, err := store.NewCache(cli, store.Root+"/")
	if err != nil {
		t.Fatal(err)
	}
	cacheDone := make(chan struct{})
	go func() { defer close(cacheDone); _ = cache.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-cacheDone })
	d := Deps{Store: st, Workloads: cache, HubID: "test-hub", Version: "test"}
	for _, o := range opts {
		o(&d)
	}
	svc, err := New(d)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(ServerOptions(nil, nil, 1<<20)...)
	svc.Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(8<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	mux := NewGatewayMux()
	if err := RegisterGateway(ctx, mux, conn, 256<<10); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	select {
	case <-cache.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("workload cache not ready after 5s")
	}
	e := &env{
		svc: svc, st: st, cli: cli, cache: cache, conn: conn, base: hs.URL, grpcAddr: lis.Addr().String(),
		wl: meridianv1.NewWorkloadServiceClient(conn), qs: meridianv1.NewQueueServiceClient(conn),
		cs: meridianv1.NewClusterServiceClient(conn), admin: meridianv1.NewAdminServiceClient(conn),
	}
	if d.CancelWait == 0 {
		folded := make(chan struct{})
		go func() {
			defer close(folded)
			cancelfold.Run(ctx, st, 5*time.Millisecond, func(k string) { t.Errorf("stored cancel request %s does not decode", k) })
		}()
		t.Cleanup(func() { cancel(); <-folded })
	}
	return e
}

// keyCount counts every key under /meridian/.
func (e *env) keyCount(t testing.TB) int64 {
	t.Helper()
	return e.countRoot(t, clientv3.WithPrefix()).Count
}

// etcdRev is etcd's current revision. A watch that resumes "from now" takes
// it rather than the cache's revision, which may not yet include a write the
// test has just made: the watch would then replay that write.
func (e *env) etcdRev(t testing.TB) int64 {
	t.Helper()
	return e.countRoot(t).Header.Revision
}

// countRoot asks etcd for a count under /meridian/ (with opts), answered
// from its index without reading a value.
func (e *env) countRoot(t testing.TB, opts ...clientv3.OpOption) *clientv3.GetResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := e.cli.Get(ctx, store.Root+"/", append(opts, clientv3.WithCountOnly())...)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mkQueues creates the queues in order (parents first).
func (e *env) mkQueues(t testing.TB, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := e.qs.CreateQueue(testCtx(t), &meridianv1.CreateQueueRequest{Queue: &meridianv1.Queue{
			Path: p, Weight: 1,
			Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: "nvidia-h100-80gb", NominalMilliGpus: 8000}},
		}}); err != nil {
			t.Fatalf("create queue %s: %v", p, err)
		}
	}
}

// tenant gives each test its own queue tenant.
func tenant(t testing.TB) string {
	return fmt.Sprintf("t%d", time.Now().UnixNano()%1_000_000_000)
}

// validWorkload is a minimal valid workload for queue q.
func validWorkload(q string) *meridianv1.Workload {
	return &meridianv1.Workload{
		Name:  "train",
		Queue: q,
		PodSets: []*meridianv1.PodSet{{
			Name: "worker", Replicas: 2,
			Resources: &meridianv1.Resources{GpuMilli: 1000, CpuMilli: 4000, MemoryMib: 8192, AcceleratorClass: "nvidia-h100-80gb"},
		}},
		Runtime: &meridianv1.RuntimeTemplate{Kind: &meridianv1.RuntimeTemplate_Container{Container: &meridianv1.ContainerTemplate{Image: "example/train:1"}}},
		Labels:  map[string]string{"team": "vision"},
	}
}
