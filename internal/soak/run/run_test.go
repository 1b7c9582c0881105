package run

import (
	"testing"

	"github.com/meridian-gpu/meridian/internal/soak/faults"
	"github.com/meridian-gpu/meridian/internal/soak/load"
)

// The soak's queues: the tenant holds every GPU, its projects' nominals
// add up to it, the two capped ones are checked at nominal + borrow, and
// the load's shares add up to one over the leaves.
func TestQueues(t *testing.T) {
	qs, caps, shares := Queues(4)
	total := int64(GPUsPerCluster*4) * 1000
	if qs[0].GetPath() != "soak" || qs[0].GetQuotas()[0].GetNominalMilliGpus() != total {
		t.Fatalf("tenant %v, want soak with %d milli", qs[0], total)
	}
	var sum int64
	for _, q := range qs[1:] {
		qq := q.GetQuotas()[0]
		sum += qq.GetNominalMilliGpus()
		if c, ok := caps[q.GetPath()][load.Class]; ok && c != qq.GetNominalMilliGpus()+qq.GetBorrowLimitMilli() {
			t.Errorf("%s: cap %d, want nominal + borrow %d", q.GetPath(), c, qq.GetNominalMilliGpus()+qq.GetBorrowLimitMilli())
		}
	}
	if sum != total || len(caps) != 2 {
		t.Fatalf("projects' nominals add to %d of %d; %d caps, want 2", sum, total, len(caps))
	}
	var share float64
	for _, s := range shares {
		share += s.Share
	}
	if share < 0.999 || share > 1.001 {
		t.Fatalf("shares add to %v", share)
	}
}

func TestNeedsProxies(t *testing.T) {
	if !needsProxies(nil) || !needsProxies([]faults.Kind{faults.AgentSlow}) || needsProxies([]faults.Kind{faults.HubKill, faults.NATSKill}) {
		t.Fatal("needsProxies: want true for all kinds and agent-slow, false for hub-kill and nats-kill")
	}
}
