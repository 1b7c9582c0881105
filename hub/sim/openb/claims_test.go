package openb

import (
	"context"
	"math"
	"path/filepath"
	"reflect"
	"runtime"
	"sync"
	"testing"

	"github.com/meridian-gpu/meridian/hub/scheduler"
)

// The tests in this file pin the headline claims of docs/benchmarks.md on
// the real trace. They need ../shared/data (MERIDIAN_REQUIRE_DATA=1 makes
// its absence a failure).

// replaySeeds runs cfg for every seed, in parallel, and summarises.
func replaySeeds(t *testing.T, nodes []NodeSpec, pods []Pod, cfg Config, seeds []int64) Summary {
	t.Helper()
	res := make([]*Result, len(seeds))
	errs := make([]error, len(seeds))
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i, s := range seeds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			c := cfg
			c.Seed = s
			res[i], errs[i] = Replay(context.Background(), nodes, pods, c)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return Summarize("default", cfg.Tune, res)
}

func seedRange(lo, hi int64) []int64 {
	var out []int64
	for s := lo; s <= hi; s++ {
		out = append(out, s)
	}
	return out
}

// Our BestFit and FGD reproduce the paper's published means on `default`
// within 0.15 points at 100% and 130% arrived load over seeds 42-51: the
// baselines every other figure is compared with are sound.
func TestPublishedBaselinesReproduce(t *testing.T) {
	nodes, pods := loadTrace(t, "default")
	pub, err := LoadPublishedFile(filepath.Join(traceDir(t), PublishedFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, pol := range []string{PolicyBestFit, PolicyFGD} {
		s := replaySeeds(t, nodes, pods, Config{Policy: pol, Tune: DefaultTune}, seedRange(42, 51))
		for _, at := range []int{100, 130} {
			want, ok := pub.Mean("default", PublishedLabel(pol), at)
			if !ok {
				t.Fatalf("no published mean for %s at %d%%", pol, at)
			}
			got := float64(s.Mean100)
			if at == 130 {
				got = float64(s.Mean130)
			}
			t.Logf("%s at %d%%: ours %.2f, published %.2f", pol, at, got, want)
			if math.Abs(got-want) > 0.15 {
				t.Errorf("%s at %d%%: ours %.2f vs published %.2f, off by more than 0.15", pol, at, got, want)
			}
		}
	}
}

// Meridian through the hub's own decision path (scheduler.Decide, the
// hub's default configuration, the target learned from past arrivals) is at
// or above FGD on `default`, on the mean of the fresh seeds 100-109 that
// no setting was chosen on.
func TestDecideMeridianAtLeastFGD(t *testing.T) {
	nodes, pods := loadTrace(t, "default")
	seeds := seedRange(100, 109)
	mer := replaySeeds(t, nodes, pods, Config{Policy: PolicyMeridian, Tune: DefaultTune, Pipeline: PipelineDecide}, seeds)
	fgd := replaySeeds(t, nodes, pods, Config{Policy: PolicyFGD, Tune: DefaultTune}, seeds)
	c := Compare("decide/meridian", mer, "kernel/fgd", fgd, 100)
	t.Logf("%s", c)
	if mer.Mean100 < fgd.Mean100 {
		t.Fatalf("Meridian through Decide %.2f < FGD %.2f at 100%% on seeds 100-109", mer.Mean100, fgd.Mean100)
	}
}

// With the kernel's settings (every fitting node a candidate, no
// shortcuts, the whole pod list as target), the decide pipeline places pod
// for pod like the kernel: the replay through Decide is faithful, and what
// separates the two pipelines is only the hub's own choices.
func TestDecidePipelineMatchesKernelWithKernelSettings(t *testing.T) {
	nodes, pods := loadTrace(t, "default")
	for _, pol := range []string{PolicyBestFit, PolicyMeridian} {
		t.Run(pol, func(t *testing.T) {
			base := Config{Policy: pol, Seed: 42, Tune: DefaultTune, MaxPods: 2500}
			kernel, err := Replay(context.Background(), nodes, pods, base)
			if err != nil {
				t.Fatal(err)
			}
			dec := base
			dec.Pipeline, dec.Target = PipelineDecide, TargetWhole
			dec.Decide = func(c *scheduler.Config) { c.NodeCandidates = len(nodes) }
			got, err := Replay(context.Background(), nodes, pods, dec)
			if err != nil {
				t.Fatal(err)
			}
			checkInvariants(t, got, nodes)
			if pol == PolicyBestFit {
				// BestFit's min-max normalisation over every feasible
				// node has no counterpart in the hub, which compares raw
				// scores: the choices agree, ties aside.
				if d := math.Abs(kernel.AllocAt(40) - got.AllocAt(40)); d > 0.5 {
					t.Fatalf("bestfit: kernel %.2f vs decide %.2f at 40%%", kernel.AllocAt(40), got.AllocAt(40))
				}
				return
			}
			for k := range kernel.Placement {
				if kernel.Placement[k] != got.Placement[k] {
					t.Fatalf("arrival %d (%+v): kernel chose node %d, decide %d", k, kernel.Arrivals[k].Req, kernel.Placement[k], got.Placement[k])
				}
			}
			if !reflect.DeepEqual(kernel.Nodes, got.Nodes) {
				t.Fatal("same choices, different node states")
			}
		})
	}
}

// On a share-heavy mix the allocation both fragmentation scorers reach is a
// rough function of the target they score against: moving FGD's typical
// shapes from 95% to 97% of the pods drops FGD by almost two points on
// default+share60 (docs/benchmarks.md, "The target is a rough surface").
// Given the same target, Meridian stays at or above FGD, both at the
// reference's 95% and off it. Seeds 100-104 of our own stress variant.
func TestMeridianAtLeastFGDWithTheSameTarget(t *testing.T) {
	nodes, pods := loadTrace(t, "default")
	pods, err := Stress(pods, nodes, "share", 60, 1)
	if err != nil {
		t.Fatal(err)
	}
	seeds := seedRange(100, 104)
	for _, pop := range []float64{0.95, 0.97} {
		cfg := Config{Tune: DefaultTune, Popularity: pop}
		cfg.Policy = PolicyMeridian
		mer := replaySeeds(t, nodes, pods, cfg, seeds)
		cfg.Policy = PolicyFGD
		fgd := replaySeeds(t, nodes, pods, cfg, seeds)
		c := Compare("meridian", mer, "fgd", fgd, 100)
		t.Logf("popularity %.2f: %s", pop, c)
		if c.MeanDiff < 0 {
			t.Errorf("popularity %.2f: Meridian %.2f below FGD %.2f on default+share60, seeds 100-104", pop, mer.Mean100, fgd.Mean100)
		}
	}
}
