package retention

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/api"
	"github.com/meridian-gpu/meridian/hub/leader"
	"github.com/meridian-gpu/meridian/hub/store"
	embedetcd "github.com/meridian-gpu/meridian/internal/embedded/etcd"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

var etcdSrv *embedetcd.Server

// TestMain runs one embedded etcd for the package. The runner works on
// the real /meridian/ key space, so the tests that use etcd do not run in
// parallel and each starts by wiping it.
func TestMain(m *testing.M) {
	var stop func()
	var err error
	if etcdSrv, stop, err = embedetcd.StartTemp("retention-etcd-"); err != nil {
		fmt.Fprintln(os.Stderr, "start embedded etcd:", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// env is a clean /meridian/ key space, a store over it and a leader term.
type env struct {
	cli   *clientv3.Client
	st    *store.Store
	el    *leader.Elector
	fence leader.Fence
	reg   *prometheus.Registry
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := testCtx(t)
	cli, err := etcdSrv.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	if _, err := cli.Delete(ctx, store.Root+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	st, err := store.New(cli, store.Options{MaxTxnOps: etcdSrv.MaxTxnOps()})
	if err != nil {
		t.Fatal(err)
	}
	el, err := leader.New(cli, store.Root+"/leader", "hub-"+t.Name(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fence, err := el.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = el.Resign(rctx)
	})
	return &env{cli: cli, st: st, el: el, fence: fence, reg: prometheus.NewRegistry()}
}

// runner builds a Runner whose clock reads now.
func (e *env) runner(t *testing.T, cfg Config, now time.Time) *Runner {
	t.Helper()
	r, err := New(Deps{Store: e.st, Leader: e.el, Clock: func() time.Time { return now }, Registerer: e.reg, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// wl describes a stored workload for put.
type wl struct {
	id, queue string
	phase     meridianv1.WorkloadPhase
	end       time.Time // zero: no end time (and create time 30 days before t0)
	idem      string    // client idempotency key; "" for none
}

// put stores w as the API and the loop would, with its idempotency key
// pointing at it, and returns the workload's mod revision.
func (e *env) put(t *testing.T, w wl) int64 {
	t.Helper()
	rec := &meridianv1.Workload{
		Id: w.id, Name: "train", Queue: w.queue, IdempotencyKey: w.idem,
		CreateTime: timestamppb.New(t0.Add(-30 * 24 * time.Hour)),
		Status:     &meridianv1.WorkloadStatus{Phase: w.phase},
	}
	if !w.end.IsZero() {
		rec.Status.EndTime = timestamppb.New(w.end)
		rec.Status.UpdateTime = timestamppb.New(w.end)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	key := wkey(t, w.id)
	ops := []store.Op{store.Put(key, b)}
	if w.idem != "" {
		ops = append(ops, store.Put(api.IdempotencyKey(w.queue, w.idem), []byte(w.id)))
	}
	if _, err := e.st.Commit(testCtx(t), nil, ops...); err != nil {
		t.Fatal(err)
	}
	_, rev, err := e.st.Get(testCtx(t), key)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

func wkey(t testing.TB, id string) string {
	t.Helper()
	k, err := api.WorkloadKey(id)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// exists reports whether key is in etcd.
func (e *env) exists(t *testing.T, key string) bool {
	t.Helper()
	resp, err := e.cli.Get(testCtx(t), key, clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count == 1
}

// workloadIDs lists the stored workload ids, in key order.
func (e *env) workloadIDs(t *testing.T) []string {
	t.Helper()
	items, _, err := e.st.List(testCtx(t), store.Prefix(store.KindWorkloads), 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, it := range items {
		_, id, err := store.ParseKey(it.Key)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// metricValue sums the samples of the named counter or gauge whose labels
// include want.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !labelsMatch(m, want) {
				continue
			}
			if c := m.GetCounter(); c != nil {
				sum += c.GetValue()
			}
			if g := m.GetGauge(); g != nil {
				sum += g.GetValue()
			}
		}
	}
	return sum
}

func labelsMatch(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == k && lp.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
