package dispatch

import (
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meridian-gpu/meridian/hub/records"
	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// heard is a FinishedSink that keeps what it was told: the finished
// workloads' keys and revisions.
type heard struct {
	mu      sync.Mutex
	held    map[string]int64
	queues  map[string]string
	resets  int
	rev     int64
	ordered bool // false once a call came out of the promised order
}

func (h *heard) Reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held, h.queues = map[string]int64{}, map[string]string{}
	h.resets++
}

func (h *heard) Finished(key string, modRev int64, s records.WorkloadSummary) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.resets == 0 || !finished(s.Phase) {
		h.ordered = false
	}
	h.held[key], h.queues[key] = modRev, s.Queue
}

func (h *heard) Forget(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.resets == 0 {
		h.ordered = false
	}
	delete(h.held, key)
}

func (h *heard) Reflects(rev int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rev = max(h.rev, rev)
}

// The loop's mirror tells its FinishedSink exactly the finished workloads
// etcd holds, each at its stored revision: those that ran to the end,
// those cancelled while queued, one deleted (forgotten) and one put back
// in the queue after it finished (forgotten, then told again when it
// finished a second time).
func TestMirrorTellsTheFinishedWorkloads(t *testing.T) {
	e := newEnv(t, fastConfig())
	sink := &heard{ordered: true}
	e.finished = sink
	e.putQueue("acme/ml/train", 64)
	e.startAgent("east", 4, 8, 200*time.Millisecond)
	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)
	const n = 16
	var ws []*meridianv1.Workload
	for i := range n {
		ws = append(ws, gpuWorkload(fmt.Sprintf("w%d", i), "acme/ml/train", 1))
	}
	e.submit(ws...)
	e.waitFor("every workload to succeed", 30*time.Second, func() bool {
		return e.countPhase(meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED) == n
	})

	// One finished workload is deleted (as retention does), and one goes
	// back to the queue (as a requeue of finished work would).
	gone, _ := WorkloadKey("w0")
	if _, err := e.cli.Delete(e.ctx, gone); err != nil {
		t.Fatal(err)
	}
	backKey, _ := WorkloadKey("w1")
	e.waitFor("the sink to hear that w1 finished", 10*time.Second, func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		_, ok := sink.held[backKey]
		return ok
	})
	back, rev := e.workload("w1")
	back.Status = &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED, PendingReason: PendingWaitingForScheduler}
	b, err := encodeWorkload(back)
	if err != nil {
		t.Fatal(err)
	}
	requeuedAt, err := e.st.Commit(e.ctx, nil, store.PutIfModRev(backKey, b, rev))
	if err != nil {
		t.Fatal(err)
	}
	// Once the mirror read the requeue, the sink no longer holds w1 as
	// finished at its old revision (it may hold it again only once it
	// finished again, at a later one).
	e.waitFor("the mirror to read the requeue", 10*time.Second, func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		return sink.rev >= requeuedAt
	})
	sink.mu.Lock()
	if r, ok := sink.held[backKey]; ok && r <= requeuedAt {
		sink.mu.Unlock()
		t.Fatalf("the sink still holds the requeued w1 as finished at revision %d (requeued at %d)", r, requeuedAt)
	}
	sink.mu.Unlock()
	e.waitFor("the requeued workload to succeed again", 30*time.Second, func() bool {
		w, _ := e.workload("w1")
		return w.GetStatus().GetPhase() == meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED
	})

	// What etcd holds now, and the sink once the mirror has read it.
	resp, err := e.cli.Get(e.ctx, prefWorkloads, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	for _, kv := range resp.Kvs {
		s, err := records.SummarizeWorkload(kv.Value)
		if err != nil {
			t.Fatal(err)
		}
		if finished(s.Phase) {
			want[string(kv.Key)] = kv.ModRevision
		}
	}
	if len(want) != n-1 {
		t.Fatalf("etcd holds %d finished workloads, want %d", len(want), n-1)
	}
	var got map[string]int64
	e.waitFor("the mirror to read the store", 10*time.Second, func() bool {
		select {
		case h.loop.kick <- struct{}{}:
		default:
		}
		sink.mu.Lock()
		defer sink.mu.Unlock()
		got = maps.Clone(sink.held)
		return sink.rev >= resp.Header.Revision
	})
	if !maps.Equal(got, want) {
		t.Fatalf("the sink holds %v\netcd's finished workloads are %v", got, want)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.resets != 1 || !sink.ordered {
		t.Fatalf("resets %d (want 1, the first read), calls in order %v", sink.resets, sink.ordered)
	}
	for k, q := range sink.queues {
		if _, ok := got[k]; ok && q != "acme/ml/train" || !strings.HasPrefix(k, prefWorkloads) {
			t.Fatalf("told %s in queue %q", k, q)
		}
	}
}
