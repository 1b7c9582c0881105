package simcluster

import (
	"context"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

const migCluster = `
fractionalModes: [mig]
migStrategy: mixed
nodes:
  - name: big
    gpus: 1
    acceleratorClass: nvidia-h100-80gb
    gpuMemoryMiB: 81920
    cpuMilli: 16000
    memoryMiB: 65536
    mig: {instances: [3g.40gb, 4g.40gb]}
  - name: ones
    gpus: 2
    acceleratorClass: nvidia-h100-80gb
    gpuMemoryMiB: 81920
    cpuMilli: 16000
    memoryMiB: 65536
    mig: {gpus: 1, instances: [1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb]}
`

func newMIG(t *testing.T, doc string) *Cluster {
	t.Helper()
	cfg, err := ParseConfig([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(cfg, Options{Clock: NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func (b *wlB) mig(profile string) *wlB {
	b.w.PodSets[len(b.w.PodSets)-1].Resources.MigProfile = profile
	return b
}

// migFree reads the free instances of profile per node from the inventory.
func migFreeOf(t *testing.T, c *Cluster, profile string) map[string]int32 {
	t.Helper()
	inv, err := c.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if inv.MIGStrategy != agentv1.MigStrategy_MIG_STRATEGY_MIXED {
		t.Fatalf("inventory MIG strategy %v, want MIXED", inv.MIGStrategy)
	}
	out := map[string]int32{}
	for _, n := range inv.Nodes {
		for _, g := range n.Gpus {
			for _, s := range g.MigProfiles {
				if s.Profile == profile {
					out[n.Name] += s.Free
				}
			}
		}
	}
	return out
}

func TestMIGPlacesOnMatchingSlices(t *testing.T) {
	ctx := context.Background()
	c := newMIG(t, migCluster)
	if got := migFreeOf(t, c, "1g.10gb"); got["ones"] != 7 {
		t.Fatalf("1g.10gb free %v, want 7 on ones", got)
	}
	if got := freeMilli(t, c); got["big"] != 1000 || got["ones"] != 2000 {
		t.Fatalf("free milli %v, want big 1000 (7 of 7 slices), ones 2000", got)
	}
	// A 3g.40gb request lands on the one GPU that has such a slice.
	if err := c.Launch(ctx, wl("a").podSet("m", 1, 0, 0).mig("3g.40gb").dispatch("a")); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, c); ev.State != agent.StateRunning {
		t.Fatalf("event %+v, want Running", ev)
	}
	if got := migFreeOf(t, c, "3g.40gb"); got["big"] != 0 {
		t.Fatalf("3g.40gb free after launch %v, want 0", got)
	}
	if got := freeMilli(t, c); got["big"] != 1000-428 {
		t.Fatalf("free milli %v, want big %d", got, 1000-428)
	}
	// A second 3g.40gb is refused although 1g slices and a 4g slice are free.
	err := c.Launch(ctx, wl("b").podSet("m", 1, 0, 0).mig("3g.40gb").dispatch("b"))
	if !agent.IsRejected(err) || !strings.Contains(err.Error(), "no free MIG 3g.40gb instance") {
		t.Fatalf("second 3g.40gb: %v, want a rejection naming the missing slice", err)
	}
	// The hub's profile for a profile-less MIG request is what the cluster takes.
	if err := c.Launch(ctx, wl("c").podSet("m", 2, 100, 0).mode(meridianv1.FractionalMode_FRACTIONAL_MODE_MIG).
		dispatch("c", &agentv1.PodSetPlacement{PodSet: "m", Nodes: []string{"ones", "ones"}, Replicas: 2, MigProfile: "1g.10gb"})); err != nil {
		t.Fatal(err)
	}
	if got := migFreeOf(t, c, "1g.10gb"); got["ones"] != 5 {
		t.Fatalf("1g.10gb free %v, want 5", got)
	}
	// A whole GPU never takes a MIG GPU: ones has one plain GPU, big none.
	if err := c.Launch(ctx, wl("d").podSet("m", 2, 1000, 0).dispatch("d")); !agent.IsRejected(err) {
		t.Fatalf("two whole GPUs with one plain GPU free: %v, want a rejection", err)
	}
	if err := c.Launch(ctx, wl("e").podSet("m", 1, 1000, 0).dispatch("e")); err != nil {
		t.Fatalf("one whole GPU on the plain GPU: %v", err)
	}
	// Cancelling gives the slice back.
	if err := c.Cancel(ctx, "a", false); err != nil {
		t.Fatal(err)
	}
	if got := migFreeOf(t, c, "3g.40gb"); got["big"] != 1 {
		t.Fatalf("3g.40gb free after cancel %v, want 1", got)
	}
}

func TestMIGConfigErrors(t *testing.T) {
	node := func(mig string) string {
		return "fractionalModes: [mig]\nmigStrategy: single\nnodes:\n  - name: gpu0\n    gpus: 2\n    acceleratorClass: x\n    gpuMemoryMiB: 40960\n    cpuMilli: 1\n    memoryMiB: 1\n    mig: " + mig + "\n"
	}
	for name, tc := range map[string]struct{ doc, field string }{
		"bad profile":      {node("{instances: [big]}"), "nodes[0].mig.instances[0]"},
		"single mixes":     {node("{instances: [3g.20gb, 4g.20gb]}"), "nodes[0].mig.instances[1]"},
		"too many slices":  {node("{instances: [4g.20gb, 4g.20gb]}"), "nodes[0].mig.instances"},
		"too much memory":  {node("{instances: [7g.80gb]}"), "nodes[0].mig.instances[0]"},
		"too many gpus":    {node("{gpus: 3, instances: [1g.5gb]}"), "nodes[0].mig.gpus"},
		"no mig mode":      {strings.Replace(node("{instances: [1g.5gb]}"), "[mig]", "[mps]", 1), "fractionalModes"},
		"unknown strategy": {strings.Replace(node("{instances: [1g.5gb]}"), "single", "dynamic", 1), "migStrategy"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), "config: "+tc.field+":") {
				t.Fatalf("err = %v, want field %s", err, tc.field)
			}
		})
	}
}

// An elastic pod set runs at exactly the size the hub admitted, even where
// more would fit, and its hint must name that many nodes.
func TestElasticRunsAtTheAdmittedSize(t *testing.T) {
	ctx := context.Background()
	c, _ := newSmall(t)
	d := wl("e").podSet("main", 4, 1000, 0).minReplicas(1).dispatch("e",
		&agentv1.PodSetPlacement{PodSet: "main", Nodes: []string{"gpu-0", "gpu-0"}, Replicas: 2})
	if err := c.Launch(ctx, d); err != nil {
		t.Fatal(err)
	}
	if got := freeMilli(t, c); got["gpu-0"]+got["gpu-1"] != 2000 {
		t.Fatalf("free milli %v, want 2 of 4 GPUs taken", got)
	}
	// A stale hint falls back to placing exactly the admitted size elsewhere.
	d2 := wl("f").podSet("main", 4, 1000, 0).minReplicas(1).dispatch("f",
		&agentv1.PodSetPlacement{PodSet: "main", Nodes: []string{"gpu-0"}, Replicas: 1})
	if err := c.Launch(ctx, d2); err != nil {
		t.Fatal(err)
	}
	if got := freeMilli(t, c); got["gpu-0"]+got["gpu-1"] != 1000 {
		t.Fatalf("free milli %v, want 3 of 4 GPUs taken", got)
	}
	ws, _ := c.List(ctx)
	if len(ws) != 2 || len(ws[0].Nodes) != 2 || len(ws[1].Nodes) != 1 {
		t.Fatalf("work %+v, want 2 and 1 replicas", ws)
	}
}
