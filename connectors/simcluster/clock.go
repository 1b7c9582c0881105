package simcluster

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// Clock is the simulated cluster's sense of time. Durations passed to
// AfterFunc and times returned by Now are simulated time.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d of simulated time has
	// passed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call if it has not happened; it reports whether it
	// did so.
	Stop() bool
}

// WallClock is implemented by clocks whose simulated time runs apart from
// the wall clock. The cluster reports event and start/finish times through
// it, so the hub sees wall-clock timestamps, while durations and usage stay
// in simulated time.
type WallClock interface {
	Wall(sim time.Time) time.Time
}

// ScaledClock runs simulated time Scale times faster than wall time: with
// Scale 60, one simulated minute passes per real second.
type ScaledClock struct {
	scale float64
	start time.Time
	now   func() time.Time
}

// NewScaledClock returns a clock running scale times faster than the wall
// clock (scale 1 is real time). scale must be positive.
func NewScaledClock(scale float64) (*ScaledClock, error) {
	if !(scale > 0) || scale > 1e6 {
		return nil, fmt.Errorf("simcluster: time scale %v must be in (0, 1e6]", scale)
	}
	return &ScaledClock{scale: scale, start: time.Now(), now: time.Now}, nil
}

// Now is the simulated time.
func (c *ScaledClock) Now() time.Time {
	real := c.now().Sub(c.start)
	return c.start.Add(time.Duration(float64(real) * c.scale))
}

// Wall converts a simulated time back to the wall-clock time it happened at.
func (c *ScaledClock) Wall(sim time.Time) time.Time {
	return c.start.Add(time.Duration(float64(sim.Sub(c.start)) / c.scale))
}

// AfterFunc waits d/scale of wall time.
func (c *ScaledClock) AfterFunc(d time.Duration, f func()) Timer {
	return time.AfterFunc(time.Duration(float64(d)/c.scale), f)
}

// FakeClock is a manual clock for tests: time moves only with Advance.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Time
	seq    int
	timers []*fakeTimer
}

type fakeTimer struct {
	c    *FakeClock
	at   time.Time
	seq  int
	f    func()
	done bool
}

// NewFakeClock starts a fake clock at start.
func NewFakeClock(start time.Time) *FakeClock { return &FakeClock{now: start} }

// Now is the fake time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f at Now()+d; it runs during the Advance that reaches it.
func (c *FakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &fakeTimer{c: c, at: c.now.Add(d), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.done {
		return false
	}
	t.done = true
	return true
}

// Advance moves time forward by d, running every timer that falls due, in
// time order, synchronously (f runs on the caller's goroutine).
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		sort.SliceStable(c.timers, func(i, j int) bool {
			if !c.timers[i].at.Equal(c.timers[j].at) {
				return c.timers[i].at.Before(c.timers[j].at)
			}
			return c.timers[i].seq < c.timers[j].seq
		})
		var next *fakeTimer
		live := c.timers[:0]
		for _, t := range c.timers {
			if t.done {
				continue
			}
			live = append(live, t)
		}
		c.timers = live
		if len(c.timers) > 0 && !c.timers[0].at.After(target) {
			next = c.timers[0]
			next.done = true
			c.timers = c.timers[1:]
			if next.at.After(c.now) {
				c.now = next.at
			}
		}
		if next == nil {
			c.now = target
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		next.f()
	}
}

// Pending is the number of timers not yet run or stopped.
func (c *FakeClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.done {
			n++
		}
	}
	return n
}
