package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/meridian-gpu/meridian/internal/soak/procs"
	"github.com/meridian-gpu/meridian/internal/soak/topology"
)

// Record is one fault as it happened.
type Record struct {
	Kind Kind `json:"kind"`
	// Target names the processes hit (hub-2, etcd-1, nats-3, agent-sim-4).
	Target string `json:"target"`
	// Injected is when the signal went out; Restored when the target was
	// resumed or restarted and ready again (zero if it never was).
	Injected time.Time `json:"injected"`
	// Restarted is when a killed target's processes were started again
	// (zero for faults that kill nothing).
	Restarted time.Time `json:"restarted,omitzero"`
	Restored  time.Time `json:"restored"`
	Hold      string    `json:"hold"`
	Err       string    `json:"error,omitempty"`
}

// Injector applies a plan to a topology.
type Injector struct {
	Top *topology.Topology
	// Log receives one line per step; nil drops them.
	Log io.Writer

	mu      sync.Mutex
	records []Record
}

// Records returns the faults so far, in order.
func (in *Injector) Records() []Record {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]Record(nil), in.records...)
}

func (in *Injector) logf(format string, args ...any) {
	if in.Log != nil {
		fmt.Fprintf(in.Log, "%s fault: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
}

// Run applies plan from start on until it ends or ctx does. Every process
// it stopped is running again when it returns, whatever happened.
func (in *Injector) Run(ctx context.Context, start time.Time, plan []Fault) {
	for _, f := range plan {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(start.Add(f.At))):
		}
		rec := in.apply(ctx, f)
		in.mu.Lock()
		in.records = append(in.records, rec)
		in.mu.Unlock()
		if rec.Err != "" {
			in.logf("%s %s: %s", f.Kind, rec.Target, rec.Err)
		} else {
			in.logf("%s %s: restored after %s", f.Kind, rec.Target, rec.Restored.Sub(rec.Injected).Round(time.Millisecond))
		}
	}
}

// apply injects one fault, holds it and undoes it.
func (in *Injector) apply(ctx context.Context, f Fault) (rec Record) {
	rec = Record{Kind: f.Kind, Hold: f.Hold.String()}
	t := in.Top
	sleep := func() {
		select {
		case <-ctx.Done():
		case <-time.After(f.Hold):
		}
	}
	fail := func(err error) Record {
		if err != nil {
			rec.Err = err.Error()
		}
		return rec
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 90*time.Second)
	defer cancel()
	switch f.Kind {
	case HubKill, HubPause:
		h, err := t.Leader(wctx)
		if err != nil {
			return fail(err)
		}
		rec.Target = h.ID
		if f.Kind == HubKill {
			in.logf("%s: SIGKILL leader %s, restart in %s", f.Kind, h.ID, f.Hold)
			rec.Injected = time.Now()
			if err := h.Proc.Kill(); err != nil {
				return fail(err)
			}
			sleep()
			if err := h.Proc.Restart(); err != nil {
				return fail(err)
			}
			if err := t.WaitHub(wctx, h); err != nil {
				return fail(err)
			}
		} else {
			in.logf("%s: SIGSTOP leader %s for %s", f.Kind, h.ID, f.Hold)
			rec.Injected = time.Now()
			if err := h.Proc.Pause(); err != nil {
				return fail(err)
			}
			sleep()
			if err := h.Proc.Resume(); err != nil {
				return fail(err)
			}
		}
	case HubsRestartAll:
		var ids []string
		for _, h := range t.Hubs {
			ids = append(ids, h.ID)
		}
		rec.Target = strings.Join(ids, ",")
		in.logf("%s: SIGKILL every hub (%s), restart in %s", f.Kind, rec.Target, f.Hold)
		rec.Injected = time.Now()
		for _, h := range t.Hubs {
			if err := h.Proc.Kill(); err != nil && !errors.Is(err, procs.ErrNotRunning) {
				return fail(err)
			}
		}
		sleep()
		rec.Restarted = time.Now()
		var errs []error
		for _, h := range t.Hubs {
			errs = append(errs, h.Proc.Restart())
		}
		for _, h := range t.Hubs {
			errs = append(errs, t.WaitHub(wctx, h))
		}
		if err := errors.Join(errs...); err != nil {
			return fail(err)
		}
	case EtcdMemberKill, EtcdLeaderKill:
		l, err := t.EtcdLeader(wctx)
		if err != nil {
			return fail(err)
		}
		m := l
		if f.Kind == EtcdMemberKill {
			var fs []*topology.EtcdMember
			for _, e := range t.Etcd {
				if e != l {
					fs = append(fs, e)
				}
			}
			m = fs[f.Pick%len(fs)]
		}
		rec.Target = m.Name
		in.logf("%s: SIGKILL %s (etcd leader %s), restart in %s", f.Kind, m.Name, l.Name, f.Hold)
		rec.Injected = time.Now()
		if err := m.Proc.Kill(); err != nil {
			return fail(err)
		}
		sleep()
		if err := m.Proc.Restart(); err != nil {
			return fail(err)
		}
		if err := procs.WaitTCP(wctx, m.Proc, strings.TrimPrefix(m.ClientURL, "http://"), 60*time.Second); err != nil {
			return fail(err)
		}
	case NATSKill:
		n := t.NATS[f.Pick%len(t.NATS)]
		rec.Target = n.Name
		in.logf("%s: SIGKILL %s, restart in %s", f.Kind, n.Name, f.Hold)
		rec.Injected = time.Now()
		if err := n.Proc.Kill(); err != nil {
			return fail(err)
		}
		sleep()
		if err := n.Proc.Restart(); err != nil {
			return fail(err)
		}
		if err := procs.WaitTCP(wctx, n.Proc, strings.TrimPrefix(n.ClientURL, "nats://"), 60*time.Second); err != nil {
			return fail(err)
		}
	case AgentStopShort, AgentStopLong:
		a := t.Agents[f.Pick%len(t.Agents)]
		rec.Target = a.Proc.Name()
		in.logf("%s: SIGSTOP %s for %s", f.Kind, rec.Target, f.Hold)
		rec.Injected = time.Now()
		if err := a.Proc.Pause(); err != nil {
			return fail(err)
		}
		sleep()
		if err := a.Proc.Resume(); err != nil {
			return fail(err)
		}
	case AgentCut, AgentSlow:
		a := t.Agents[f.Pick%len(t.Agents)]
		rec.Target = a.Proc.Name()
		if len(a.Proxies) == 0 {
			return fail(errors.New("the agents run without proxies (topology.Config.AgentProxies)"))
		}
		rec.Injected = time.Now()
		if f.Kind == AgentCut {
			in.logf("%s: cut %s off from NATS for %s", f.Kind, rec.Target, f.Hold)
			a.CutOff(true)
			sleep()
			a.CutOff(false)
		} else {
			lat := 200*time.Millisecond + time.Duration(f.Pick%301)*time.Millisecond
			rec.Target += fmt.Sprintf(" +%s", lat)
			in.logf("%s: delay %s's NATS traffic by %s each way for %s", f.Kind, a.Proc.Name(), lat, f.Hold)
			a.SetLatency(lat)
			sleep()
			a.SetLatency(0)
		}
	default:
		return fail(fmt.Errorf("unknown fault kind %q", f.Kind))
	}
	rec.Restored = time.Now()
	return rec
}
