package dispatch

import (
	"fmt"
	"log/slog"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/scheduler"
	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// queuedWorkload is a queued workload as the API stores it: labels, a
// condition, a pending reason.
func queuedWorkload(i int, t0 time.Time) *meridianv1.Workload {
	w := gpuWorkload(fmt.Sprintf("w%06d", i), "team/a", 1)
	w.Labels = map[string]string{"team": "vision", "run": fmt.Sprint(i)}
	w.CreateTime = timestamppb.New(t0.Add(time.Duration(i) * time.Millisecond))
	w.Status = &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED,
		PendingReason: "waiting its turn in team/a", PendingReasonCode: "Deferred", UpdateTime: w.CreateTime,
		Conditions: []*meridianv1.Condition{{Type: "Admitted", Status: meridianv1.ConditionStatus_CONDITION_STATUS_FALSE,
			Reason: "Waiting", Message: "waiting its turn", LastTransitionTime: w.CreateTime}}}
	return w
}

// fill puts n queued workloads into a fresh mirror that keeps those
// deeper than beyond compact (0: none). It returns the stored values too,
// which in the hub the watch cache holds either way.
func fill(t testing.TB, n, beyond int) (*mirror, []*meridianv1.Workload, [][]byte) {
	l := &Loop{log: slog.New(slog.DiscardHandler)}
	m := &mirror{}
	m.reset()
	m.compactBeyond = beyond
	t0 := time.Unix(1_700_000_000, 0)
	var ws []*meridianv1.Workload
	var raws [][]byte
	for i := range n {
		w := queuedWorkload(i, t0)
		b, err := proto.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		k, _ := WorkloadKey(w.GetId())
		m.put(l, k, store.Item{Key: k, Value: b, ModRev: int64(i + 1), CreateRev: int64(i + 1)})
		ws, raws = append(ws, w), append(raws, b)
	}
	return m, ws, raws
}

// TestCompactBacklog: workloads deep in a long backlog are kept compact
// (undecoded) without changing what the backlog says (order, counts,
// demand), a compact one decodes to exactly what was stored when read,
// and they take about half the memory.
func TestCompactBacklog(t *testing.T) {
	const n, beyond = 40, 8
	m, ws, _ := fill(t, n, beyond)
	plain, _, _ := fill(t, n, 0)
	compact := 0
	for _, w := range m.byID {
		if w.pb == nil {
			compact++
		}
	}
	if compact != n-beyond {
		t.Fatalf("%d compact, want %d (those filed behind %d others)", compact, n-beyond, beyond)
	}
	var order, plainOrder []string
	m.backlog.heads(-1, func(w *wl) bool { order = append(order, w.id()); return true })
	plain.backlog.heads(-1, func(w *wl) bool { plainOrder = append(plainOrder, w.id()); return true })
	if fmt.Sprint(order) != fmt.Sprint(plainOrder) || fmt.Sprint(m.backlog.count) != fmt.Sprint(plain.backlog.count) ||
		fmt.Sprint(m.backlog.demand) != fmt.Sprint(plain.backlog.demand) {
		t.Fatalf("the compact backlog differs: order %v vs %v, count %v vs %v, demand %v vs %v",
			order, plainOrder, m.backlog.count, plain.backlog.count, m.backlog.demand, plain.backlog.demand)
	}
	last := m.byID[ws[n-1].GetId()]
	if last.phase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED || last.pb != nil {
		t.Fatalf("the last workload: phase %s, decoded %v; want queued and compact", last.phase(), last.pb != nil)
	}
	if !proto.Equal(last.doc(), ws[n-1]) || last.pb == nil || last.raw != nil {
		t.Fatalf("a compact workload read back as %v, want %v (and decoded from then on)", last.doc(), ws[n-1])
	}
	// Rewritten (a new reason): one that was read stays decoded, one that
	// was not stays compact.
	l := &Loop{log: slog.New(slog.DiscardHandler)}
	rewrite := func(w *meridianv1.Workload, rev int64) *wl {
		w = proto.Clone(w).(*meridianv1.Workload)
		w.Status.PendingReason = "rewritten"
		b, _ := proto.Marshal(w)
		k, _ := WorkloadKey(w.GetId())
		old := m.workloads[k]
		m.put(l, k, store.Item{Key: k, Value: b, ModRev: rev, CreateRev: old.createRev})
		return m.workloads[k]
	}
	if e := rewrite(ws[n-1], 1000); e.pb == nil {
		t.Fatal("a workload that was read was compacted again when rewritten")
	}
	if e := rewrite(ws[n-2], 1001); e.pb != nil {
		t.Fatal("a compact workload was decoded for good when rewritten")
	}

	// Memory, a backlog of 20,000 behind a window of 2,048 (compact
	// beyond 4,096) against all decoded, in this process, each with the
	// stored values (the watch cache's).
	heap := func(f func() any) uint64 {
		runtime.GC()
		var a, b runtime.MemStats
		runtime.ReadMemStats(&a)
		keep := f()
		runtime.GC()
		runtime.ReadMemStats(&b)
		runtime.KeepAlive(keep)
		return b.HeapAlloc - min(a.HeapAlloc, b.HeapAlloc)
	}
	const big = 20_000
	decoded := heap(func() any { m, _, raws := fill(t, big, 0); return []any{m, raws} })
	kept := heap(func() any { m, _, raws := fill(t, big, 2*DefaultWindow); return []any{m, raws} })
	t.Logf("%d queued: %d B each decoded, %d B each with the backlog compact", big, decoded/big, kept/big)
	// About half (1,070 B against 2,000 to 2,200 B); the bound leaves
	// room for the noise of other tests' garbage in the same process.
	if kept*10 > decoded*6 {
		t.Fatalf("compact backlog: %d B per workload, all decoded %d B: want at most 60%%", kept/big, decoded/big)
	}
}

// Workloads decoded apart share one copy of their queue's name, and
// records one copy of their cluster's and classes' names: the core's
// per-cycle sums compare them by pointer.
func TestMirrorSharesNames(t *testing.T) {
	m, _, _ := fill(t, 3, 0)
	var data []*byte
	for _, w := range m.byID {
		if w.sw == nil || w.sw.Queue != "team/a" {
			t.Fatalf("workload %s: core view %+v", w.key, w.sw)
		}
		data = append(data, unsafe.StringData(w.sw.Queue))
	}
	if len(data) != 3 || data[0] != data[1] || data[1] != data[2] {
		t.Fatalf("queue names of 3 workloads are not one copy: %v", data)
	}
	rec := func() *Record {
		// Built from bytes, as a decode makes them: distinct copies.
		return &Record{Cluster: string([]byte("east")), Queue: string([]byte("team/a")),
			Usage: []scheduler.ClassMilli{{Class: string([]byte("h100")), Milli: 1000}}}
	}
	a, b := rec(), rec()
	m.internRecord(a)
	m.internRecord(b)
	if unsafe.StringData(a.Cluster) != unsafe.StringData(b.Cluster) || unsafe.StringData(a.Usage[0].Class) != unsafe.StringData(b.Usage[0].Class) ||
		unsafe.StringData(a.Queue) != data[0] {
		t.Fatalf("records keep their own copies of cluster, queue or class names")
	}
}
