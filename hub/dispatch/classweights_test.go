package dispatch

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// putClassQueue stores a queue with a quota of one class.
func (e *env) putClassQueue(path, class string, nominalGPUs int64) {
	e.t.Helper()
	q := &meridianv1.Queue{Path: path, Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: class, NominalMilliGpus: nominalGPUs * 1000}}}
	b, _ := proto.Marshal(q)
	k, err := store.Key(store.KindQueues, path)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.st.Commit(e.ctx, nil, store.Put(k, b)); err != nil {
		e.t.Fatal(err)
	}
}

// With class weights {h100: 4}, a queue running one H100 accrues four
// times the fairshare usage of a queue running one T4 for the same time,
// as QueueStatus (the API's queue status) reports it.
func TestClassWeightsWeighTheLedger(t *testing.T) {
	cfg := fastConfig()
	cfg.ClassWeights = map[string]float64{"h100": 4}
	e := newEnv(t, cfg)
	e.putClassQueue("acme/ml/big", "h100", 1)
	e.putClassQueue("acme/ml/small", "t4", 1)
	e.startAgent("east", 1, 1, 0)
	west := e.startAgent("west", 1, 1, 0)
	west.mu.Lock()
	west.nodes[0].AcceleratorClass = "t4"
	west.mu.Unlock()
	west.advertise()
	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)
	big := gpuWorkload("big", "acme/ml/big", 1)
	small := gpuWorkload("small", "acme/ml/small", 1)
	small.PodSets[0].Resources.AcceleratorClass = "t4"
	e.submit(big, small)
	decayed := func(path string) float64 {
		qs := h.loop.QueueStatus(path)
		if qs == nil || len(qs.Classes) == 0 {
			return 0
		}
		return qs.Classes[0].DecayedGpuSeconds
	}
	e.waitFor("both queues to accrue a few GPU-seconds", 30*time.Second, func() bool {
		return decayed("acme/ml/small") > 2
	})
	b, s := decayed("acme/ml/big"), decayed("acme/ml/small")
	if ratio := b / s; ratio < 3 || ratio > 5 {
		t.Fatalf("decayed GPU-seconds: big (h100, weight 4) %.2f, small (t4, weight 1) %.2f: ratio %.2f, want about 4", b, s, ratio)
	}
	if fb, fs := h.loop.QueueStatus("acme/ml/big").Classes[0].FairshareFactor, h.loop.QueueStatus("acme/ml/small").Classes[0].FairshareFactor; !(fb < fs) {
		t.Fatalf("fairshare factor big %.3f, small %.3f: the weighted queue should rank lower", fb, fs)
	}
}
