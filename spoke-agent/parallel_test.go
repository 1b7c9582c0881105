package agent_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// gatedLaunch holds every Launch until the gate opens, and records the
// order of Launch and Cancel calls per dispatch id.
type gatedLaunch struct {
	agent.Connector
	gate chan struct{}

	mu       sync.Mutex
	inLaunch int
	peak     int
	calls    []string // "launch-start:id", "launch-end:id", "cancel:id"
	arrived  chan struct{}
}

func (g *gatedLaunch) record(s string) {
	g.mu.Lock()
	g.calls = append(g.calls, s)
	g.mu.Unlock()
}

func (g *gatedLaunch) Launch(ctx context.Context, d *agentv1.Dispatch) error {
	g.mu.Lock()
	g.inLaunch++
	g.peak = max(g.peak, g.inLaunch)
	g.calls = append(g.calls, "launch-start:"+d.GetDispatchId())
	g.mu.Unlock()
	select {
	case g.arrived <- struct{}{}:
	default:
	}
	<-g.gate
	err := g.Connector.Launch(ctx, d)
	g.mu.Lock()
	g.inLaunch--
	g.calls = append(g.calls, "launch-end:"+d.GetDispatchId())
	g.mu.Unlock()
	return err
}

func (g *gatedLaunch) Cancel(ctx context.Context, id string, preempt bool) error {
	g.record("cancel:" + id)
	return g.Connector.Cancel(ctx, id, preempt)
}

func (g *gatedLaunch) snapshot() (int, []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.peak, slices.Clone(g.calls)
}

// Several dispatches are launched at once: with every Launch held at the
// gate, all of them are inside Launch together, which one-at-a-time
// handling could never reach. The cluster has 4 GPUs, so of 6 one-GPU
// dispatches launched together exactly 4 are accepted and 2 rejected:
// concurrent launches never share capacity.
func TestDispatchesLaunchInParallel(t *testing.T) {
	const n, gpus = 6, 4
	g := &gatedLaunch{gate: make(chan struct{}), arrived: make(chan struct{}, 1)}
	e := newEnv(t, func(e *env) {
		e.wrap = func(c agent.Connector) agent.Connector { g.Connector = c; return g }
	})
	for i := range n {
		id := fmt.Sprintf("par-%d", i)
		e.publish(id, dispatchMsg(id, 1, nil))
	}
	e.waitFor(fmt.Sprintf("%d launches in flight together", n), func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.inLaunch == n
	})
	close(g.gate)
	answered := func() (acc, rej int) {
		for i := range n {
			id := fmt.Sprintf("par-%d", i)
			if e.started(id)() {
				acc++
			}
			if e.hasEvent(id, rejected)() {
				rej++
			}
		}
		return acc, rej
	}
	e.waitFor("every dispatch answered", func() bool { a, r := answered(); return a+r == n })
	if acc, rej := answered(); acc != gpus || rej != n-gpus {
		t.Fatalf("%d accepted and %d rejected, want %d and %d", acc, rej, gpus, n-gpus)
	}
	if peak, _ := g.snapshot(); peak != n {
		t.Fatalf("peak launches in flight %d, want %d", peak, n)
	}
	if got := e.sim.Running(); got > gpus {
		t.Fatalf("%d dispatches running on %d GPUs", got, gpus)
	}
}

// LaunchParallelism bounds the connector calls, not the messages in hand:
// with 2 slots and 6 dispatches held at the gate, exactly 2 are inside
// Launch, however long they wait; once the gate opens, all 6 are answered.
func TestLaunchParallelismBoundsConnectorCalls(t *testing.T) {
	const n, slots = 6, 2
	g := &gatedLaunch{gate: make(chan struct{}), arrived: make(chan struct{}, 1)}
	e := newEnv(t, func(e *env) {
		e.launchParallelism = slots
		e.wrap = func(c agent.Connector) agent.Connector { g.Connector = c; return g }
	})
	for i := range n {
		id := fmt.Sprintf("slot-%d", i)
		e.publish(id, dispatchMsg(id, 1, nil))
	}
	e.waitFor(fmt.Sprintf("%d launches in flight", slots), func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.inLaunch == slots
	})
	time.Sleep(300 * time.Millisecond) // time for a wrongly unbounded launch to start
	if peak, _ := g.snapshot(); peak != slots {
		t.Fatalf("peak launches in flight %d, want %d", peak, slots)
	}
	close(g.gate)
	for i := range n {
		id := fmt.Sprintf("slot-%d", i)
		e.waitFor(id+" answered", func() bool { return e.started(id)() || e.hasEvent(id, rejected)() })
	}
	if peak, _ := g.snapshot(); peak != slots {
		t.Fatalf("peak launches in flight %d after the gate opened, want %d", peak, slots)
	}
}

// A cancel that arrives while its dispatch is still launching waits for
// the launch to finish, so the connector never sees a cancel for work it
// is about to start, and the work ends cancelled rather than running.
func TestCancelWaitsForItsLaunch(t *testing.T) {
	g := &gatedLaunch{gate: make(chan struct{}), arrived: make(chan struct{}, 1)}
	e := newEnv(t, func(e *env) {
		e.wrap = func(c agent.Connector) agent.Connector { g.Connector = c; return g }
	})
	e.publish("slow", dispatchMsg("slow", 1, nil))
	select {
	case <-g.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("launch never started")
	}
	e.publish("cancel-slow", cancelMsg("slow", false))
	// Another dispatch is not held up by the waiting cancel.
	e.publish("other", dispatchMsg("other", 1, nil))
	e.waitFor("the other launch to start", func() bool {
		_, calls := g.snapshot()
		return slices.Contains(calls, "launch-start:other")
	})
	time.Sleep(100 * time.Millisecond) // give a wrongly unserialized cancel time to overtake
	close(g.gate)
	e.waitFor("slow cancelled", e.hasEvent("slow", cancelled))
	_, calls := g.snapshot()
	end, cancel := slices.Index(calls, "launch-end:slow"), slices.Index(calls, "cancel:slow")
	if end < 0 || cancel < 0 || cancel < end {
		t.Fatalf("calls %v: the cancel must come after the launch ended", calls)
	}
	e.waitFor("other accepted", e.started("other"))
}
