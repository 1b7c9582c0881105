package dispatch

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// The workloads the loop keeps for its events (recentWrites) are, at every
// moment of a real run, exactly what etcd holds at the revision they are
// kept for: an entry that differed (a workload changed after it was
// encoded, or kept under the wrong revision) would have an event write
// back something other than the stored workload. The events also use them:
// a run in which every event decoded its workload again would pass the
// first check and fail the second.
func TestRecentWritesMatchTheStore(t *testing.T) {
	e := newEnv(t, fastConfig())
	e.putQueue("acme/ml/train", 64)
	e.startAgent("east", 4, 8, 300*time.Millisecond)
	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)
	const n = 24
	var ws []*meridianv1.Workload
	for i := range n {
		ws = append(ws, gpuWorkload(fmt.Sprintf("w%d", i), "acme/ml/train", 1))
	}
	e.submit(ws...)

	checked := 0
	check := func() {
		r := &h.loop.recent
		r.mu.Lock()
		kept := make(map[string]ownWrite, len(r.m))
		for k, v := range r.m {
			kept[k] = v
		}
		r.mu.Unlock()
		for k, v := range kept {
			resp, err := e.cli.Get(e.ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Kvs) == 0 || resp.Kvs[0].ModRevision != v.rev {
				continue // written again (or deleted) since: the entry is stale, and unused
			}
			stored, err := decodeWorkload(resp.Kvs[0].Value)
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(stored, v.w) {
				t.Fatalf("%s at revision %d: kept %v, stored %v", k, v.rev, v.w, stored)
			}
			checked++
		}
	}
	e.waitFor("every workload to succeed", 30*time.Second, func() bool {
		check()
		return e.countPhase(meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED) == n
	})
	t.Logf("compared %d kept workloads with the store; %d copies used", checked, h.loop.recent.hits.Load())
	if checked == 0 {
		t.Fatal("no kept workload was ever compared with the store")
	}
	// Each workload's ACCEPTED (or RUNNING) event starts from the dispatch
	// the cycle wrote, and its SUCCEEDED, when it comes in a later
	// transaction, from the event's own write: usually two copies a
	// workload. On a loaded machine an agent's batch may carry both
	// events of a workload, and the second then starts from the first's
	// result inside the same transaction (CI saw 46 for 24), so the bound
	// is the first event's copy.
	if hits := h.loop.recent.hits.Load(); hits < n {
		t.Fatalf("the events copied %d kept workloads for %d workloads; want at least one each", hits, n)
	}
	e.waitFor("the finished workloads to leave the memory", 10*time.Second, func() bool {
		h.loop.recent.mu.Lock()
		defer h.loop.recent.mu.Unlock()
		return len(h.loop.recent.m) == 0
	})
}
