package kubernetes

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// eventLog collects a connector's events by dispatch, as the agent's one
// reader would.
type eventLog struct {
	mu  sync.Mutex
	evs map[string][]agent.WorkEvent
}

func collectEvents(t *testing.T, c *Connector) *eventLog {
	l := &eventLog{evs: map[string][]agent.WorkEvent{}}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case ev := <-c.Events():
				l.mu.Lock()
				l.evs[ev.DispatchID] = append(l.evs[ev.DispatchID], ev)
				l.mu.Unlock()
			case <-done:
				return
			}
		}
	}()
	t.Cleanup(func() { close(done); <-stopped })
	return l
}

// states lists the states of id's events, in order.
func (l *eventLog) states(id string) []agent.WorkState {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []agent.WorkState
	for _, ev := range l.evs[id] {
		out = append(out, ev.State)
	}
	return out
}

func (l *eventLog) has(id string, st agent.WorkState) bool {
	for _, s := range l.states(id) {
		if s == st {
			return true
		}
	}
	return false
}

// inParallel runs f for every id at once and fails the test on the first
// error.
func inParallel(t *testing.T, ids []string, f func(id string) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(ids))
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(id); err != nil {
				errs <- fmt.Errorf("%s: %w", id, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestK8sConcurrentLaunchAndCancel drives the connector as the agent does
// now that it handles dispatches in parallel: Launch and Cancel for
// different dispatch ids at the same time (never two calls for one id),
// with List, Inventory and Cancels of unknown ids beside them. Under -race
// it checks the connector's shared state; against the apiserver it checks
// the outcome: every cancelled dispatch reports Running then Cancelled,
// exactly once, and has no Job left; every dispatch launched beside the
// cancels is one Job and reports Succeeded.
func TestK8sConcurrentLaunchAndCancel(t *testing.T) {
	t.Parallel() // own namespace and connector; CPU-only pods
	e := newEnv(t, Config{})
	c := e.connector()
	events := collectEvents(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 10
	stamp := time.Now().UnixNano()
	var long, short, unknown []string
	for i := range n {
		long = append(long, fmt.Sprintf("d-cc-long%d-%d", stamp, i))
		short = append(short, fmt.Sprintf("d-cc-short%d-%d", stamp, i))
		unknown = append(unknown, fmt.Sprintf("d-cc-none%d-%d", stamp, i))
	}

	// Round 1: the long dispatches, all launched at once.
	inParallel(t, long, func(id string) error {
		return c.Launch(ctx, makeDispatch(id).PodSet("w", 1, 0).Extra(kwokDelay("300s")).Obj())
	})
	eventually(t, 90*time.Second, "every long dispatch to run", func() bool {
		for _, id := range long {
			if !events.has(id, agent.StateRunning) {
				return false
			}
		}
		return true
	})

	// Round 2, all at once: cancel the long ones, launch the short ones,
	// cancel ids never launched, and read List and Inventory meanwhile.
	var readers sync.WaitGroup
	var reads atomic.Int64
	stopReads := make(chan struct{})
	for range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stopReads:
					return
				default:
				}
				if _, err := c.List(ctx); err != nil {
					t.Errorf("List: %v", err)
					return
				}
				if _, err := c.Inventory(ctx); err != nil {
					t.Errorf("Inventory: %v", err)
					return
				}
				reads.Add(1)
			}
		}()
	}
	var all []string
	all = append(append(append(all, long...), short...), unknown...)
	isShort := map[string]bool{}
	for _, id := range short {
		isShort[id] = true
	}
	inParallel(t, all, func(id string) error {
		if isShort[id] {
			return c.Launch(ctx, makeDispatch(id).PodSet("w", 1, 0).Extra(kwokDelay("1s")).Obj())
		}
		return c.Cancel(ctx, id, false)
	})
	close(stopReads)
	readers.Wait()
	if reads.Load() == 0 {
		t.Fatal("List and Inventory never ran beside the launches and cancels")
	}

	// Cancel returns once the deletion is asked for; the final state comes
	// on Events after the pods go, which takes longer on a loaded machine.
	eventually(t, 60*time.Second, "every cancelled dispatch to report Cancelled", func() bool {
		for _, id := range long {
			if !events.has(id, agent.StateCancelled) {
				return false
			}
		}
		return true
	})
	for _, id := range long {
		if got := events.states(id); len(got) != 2 || got[0] != agent.StateRunning || got[1] != agent.StateCancelled {
			t.Errorf("cancelled dispatch %s: events %v, want [Running Cancelled]", id, got)
		}
	}
	eventually(t, 60*time.Second, "the cancelled dispatches' Jobs to be deleted", func() bool {
		for _, id := range long {
			if len(e.jobsOf(id)) != 0 {
				return false
			}
		}
		return true
	})
	eventually(t, 90*time.Second, "every short dispatch to succeed", func() bool {
		for _, id := range short {
			if !events.has(id, agent.StateSucceeded) {
				return false
			}
		}
		return true
	})
	for _, id := range short {
		if jobs := e.jobsOf(id); len(jobs) != 1 {
			t.Errorf("dispatch %s launched beside the cancels has %d Jobs, want 1", id, len(jobs))
		}
		terminal := 0
		for _, st := range events.states(id) {
			if st.Terminal() {
				terminal++
			}
		}
		if terminal != 1 {
			t.Errorf("dispatch %s: events %v, want exactly one terminal state", id, events.states(id))
		}
	}
	for _, id := range unknown {
		if got := events.states(id); len(got) != 0 {
			t.Errorf("cancelling the unknown dispatch %s emitted %v, want nothing", id, got)
		}
	}
}
