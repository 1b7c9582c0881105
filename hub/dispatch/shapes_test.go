package dispatch

import (
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/hub/scheduler"
)

// The loop learns the meridian policy's target from what is submitted:
// every workload's shape enters the history once, when its key first
// appears, and stays after the workload is dispatched; the cycle hands
// the core that history as Config.Target.
func TestLoopLearnsTheShapesSubmitted(t *testing.T) {
	e := newEnv(t, fastConfig())
	e.putQueue("acme/ml/train", 8)
	e.startAgent("east", 2, 8, 0)
	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)
	e.submit(gpuWorkload("one", "acme/ml/train", 1), gpuWorkload("two", "acme/ml/train", 2), gpuWorkload("two-b", "acme/ml/train", 2))
	e.waitFor("all three dispatched", 20*time.Second, func() bool {
		n := 0
		for _, w := range e.workloads() {
			if w.GetStatus().GetCluster() != "" {
				n++
			}
		}
		return n == 3
	})
	l := h.loop
	cfg := func() scheduler.Config {
		l.lockState()
		defer l.unlockState()
		return l.schedulerConfig()
	}()
	if cfg.Target == nil {
		t.Fatal("the cycle's configuration has no target")
	}
	shapes := cfg.Target.Shapes()
	weight := map[int32]float64{}
	for _, s := range shapes {
		weight[s.GPUs] += s.Weight
	}
	if len(shapes) != 2 || weight[1] < 0.33 || weight[1] > 0.34 || weight[2] < 0.66 || weight[2] > 0.67 {
		t.Fatalf("target %+v: want 1-GPU at 1/3 and 2-GPU at 2/3 (each workload counted once, dispatched or not)", shapes)
	}
	// A configured scorer or target is the operator's: left alone.
	l.cfg.Scheduler.Policy = scheduler.PolicyBestFit
	if c := l.schedulerConfig(); c.Target != nil {
		t.Fatal("bestfit got a target")
	}
}
