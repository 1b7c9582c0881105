package dispatch

import (
	"context"
	"fmt"
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
		t.ledger.Accrue(w.GetQueue(), u.Class, u.Milli, from, to)
	}
	t.accruedTo[w.GetId()] = to
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
// and persists the ledger (fenced) every LedgerPersistEvery.
func (l *Loop) accrue(t *term, b *built, now time.Time) error {
	t.mu.Lock()
	live := map[string]bool{}
	for _, r := range b.current {
		w := b.byID[r.r.WorkloadID]
		if w.w.GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING {
			continue
		}
		live[w.w.GetId()] = true
		accrueOneLocked(t, w.w, r.r, now)
	}
	for id := range t.accruedTo {
		if !live[id] {
			delete(t.accruedTo, id)
		}
	}
	due := now.Sub(t.ledgerSavedAt) >= l.cfg.LedgerPersistEvery
	var data []byte
	var err error
	if due {
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
