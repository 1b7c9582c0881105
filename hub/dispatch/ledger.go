package dispatch

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/meridian-gpu/meridian/hub/quota"
	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// loadLedger reads the persisted ledger, or starts an empty one.
func (l *Loop) loadLedger(ctx context.Context, t *term) error {
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	b, _, err := l.st.Get(gctx, LedgerKey)
	led := quota.NewLedger(l.cfg.LedgerHalfLife, nil)
	switch {
	case store.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("read ledger: %w", err)
	default:
		if uerr := led.UnmarshalJSON(b); uerr != nil {
			// A broken ledger must not stop scheduling: start fresh, loudly.
			l.log.Error("stored ledger does not decode; starting an empty one", "key", LedgerKey, "err", uerr)
			led = quota.NewLedger(l.cfg.LedgerHalfLife, nil)
		}
	}
	// The configured class weights win over those stored with the ledger:
	// past usage stays as accrued, new usage is weighted as configured.
	led.Configure(led.HalfLife(), l.cfg.ClassWeights)
	now := l.clock()
	t.ledger = led
	t.ledgerFloor = led.DecayedTo()
	if t.ledgerFloor.IsZero() || t.ledgerFloor.After(now) {
		t.ledgerFloor = now
	}
	t.ledgerSavedAt = now
	return nil
}

// accrueOne adds a running workload's usage to the ledger up to `to`.
// Callers hold t.mu.
func accrueOneLocked(t *term, w *meridianv1.Workload, r *Record, to time.Time) {
	accrueInto(t, w, r, to, t.ledger.Accrue)
}

// accrual is one (queue, class, interval) of usage to charge; many running
// workloads share one, so accrue charges each once with their summed milli
// (the ledger's charge is linear in milli).
type accrual struct {
	leaf, class string
	from, to    int64 // unix nanoseconds
}

// accrueInto works out a running workload's interval to charge since its
// last accrual, up to `to`, and hands it to add. Callers hold t.mu.
func accrueInto(t *term, w *meridianv1.Workload, r *Record, to time.Time, add func(leaf, class string, milli int64, from, to time.Time)) {
	if w.GetStatus().GetStartTime() == nil {
		return
	}
	from := w.GetStatus().GetStartTime().AsTime()
	if a, ok := t.accruedTo[w.GetId()]; ok && a.After(from) {
		from = a
	}
	if t.ledgerFloor.After(from) {
		from = t.ledgerFloor
	}
	if !to.After(from) {
		return
	}
	for _, u := range r.Usage {
		add(w.GetQueue(), u.Class, u.Milli, from, to)
	}
	t.accruedTo[w.GetId()] = to
}

// forgetStopped drops the accrual marks of workloads that no longer run.
// It runs with each ledger write, not each pass: a stale mark only costs
// memory until then, since a workload dispatched again charges from its
// new start, which is later. Callers hold t.mu.
func forgetStopped(t *term, b *built) {
	for id := range t.accruedTo {
		if w := b.byID[id]; w == nil || w.phase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING {
			delete(t.accruedTo, id)
		}
	}
}

// finalAccrual accrues a workload that just stopped, up to its end.
func (l *Loop) finalAccrual(t *term, w *meridianv1.Workload, r *Record, end time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w.GetStatus().GetPhase() == meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING {
		accrueOneLocked(t, w, r, end)
	}
}

// accrue charges every running workload's GPU usage since its last accrual
// up to the last heartbeat that showed it running (never past what the hub
// knows: the rest is accrued from the agent's end time when the workload
// stops), and persists the ledger (fenced) every LedgerPersistEvery.
func (l *Loop) accrue(t *term, b *built, now time.Time) error {
	t.mu.Lock()
	skip := now.Sub(t.accruedAt) < l.cfg.AccrueEvery && now.Sub(t.ledgerSavedAt) < l.cfg.LedgerPersistEvery
	if !skip {
		t.accruedAt = now
	}
	t.mu.Unlock()
	if skip {
		return nil
	}
	// Usage is charged up to the last heartbeat that showed the work
	// running, so only the clusters that sent one since the last pass have
	// anything new to charge. A workload whose cluster sent none loses
	// nothing by waiting: the next heartbeat that shows it charges its
	// whole interval since its last charge (or start), and one that stops
	// first is charged up to its end (finalAccrual). With heartbeats every
	// 2 s and a pass every second, this skips half the walk.
	type seen struct {
		ids map[string]string // dispatch id -> workload id; the fleet's, read-only
		at  time.Time
	}
	hb := map[string]seen{}
	for _, c := range l.fleet.IDs() {
		ids, at, ok := l.fleet.ReportedSet(c)
		if !ok || !at.After(t.heartbeatCharged[c]) {
			continue
		}
		hb[c] = seen{ids: ids, at: at}
	}
	t.mu.Lock()
	due := now.Sub(t.ledgerSavedAt) >= l.cfg.LedgerPersistEvery
	if len(hb) > 0 {
		sums := map[accrual]int64{}
		add := func(leaf, class string, milli int64, from, to time.Time) {
			sums[accrual{leaf: leaf, class: class, from: from.UnixNano(), to: to.UnixNano()}] += milli
		}
		for id, c := range b.current {
			h, ok := hb[c.r.r.Cluster]
			if !ok || c.w.phase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING {
				continue
			}
			if _, shown := h.ids[id]; shown {
				to := h.at
				if now.Before(to) {
					to = now
				}
				accrueInto(t, c.w.doc(), c.r.r, to, add)
			}
		}
		// In a fixed order, so that float sums come out the same every time.
		keys := slices.SortedFunc(maps.Keys(sums), func(a, b accrual) int {
			return cmp.Or(strings.Compare(a.leaf, b.leaf), strings.Compare(a.class, b.class), cmp.Compare(a.from, b.from), cmp.Compare(a.to, b.to))
		})
		for _, k := range keys {
			t.ledger.Accrue(k.leaf, k.class, sums[k], time.Unix(0, k.from), time.Unix(0, k.to))
		}
		for c, h := range hb {
			t.heartbeatCharged[c] = h.at
		}
	}
	var data []byte
	var err error
	if due {
		forgetStopped(t, b)
		t.ledger.DecayTo(now)
		data, err = t.ledger.MarshalJSON()
	}
	t.mu.Unlock()
	if !due {
		return nil
	}
	if err != nil {
		return fmt.Errorf("encode ledger: %w", err)
	}
	if _, err := l.commit(t, store.Put(LedgerKey, data)); err != nil {
		return fmt.Errorf("persist ledger: %w", err)
	}
	t.mu.Lock()
	t.ledgerSavedAt = now
	t.mu.Unlock()
	return nil
}
