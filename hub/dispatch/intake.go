package dispatch

import (
	"context"
	"strings"
	"time"

	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// The intake lets the leader's loop store new workloads itself: the API
// hands it a submit instead of writing the workloads QUEUED, the next
// cycle decides for them with the stored work, and its commit creates
// each one as it stands after the decision: DISPATCHED with its dispatch
// when it was placed, QUEUED with its pending reason when not. A workload
// the cluster has room for is then written once where it used to be
// written twice (QUEUED by the API, DISPATCHED by the loop a few
// milliseconds later), and the mirror, the watch cache, raft and the
// agents' views see one change fewer (docs/design/submit-through-the-loop.md).
//
// A submit the loop cannot take (this replica does not lead, the intake
// is off or full) comes back untaken, and so does one whose commit was
// refused (a conflict: nothing was written) or never sent: the API then
// stores it QUEUED itself, as it always did, so the intake only ever
// changes who writes a submit first, never whether it is stored. A commit
// whose outcome is unknown (etcd did not answer) comes back as that
// error, as the API's own commit would have.

// maxIntake bounds the workloads waiting for a cycle. Past it the API
// stores submits QUEUED itself: a loop that falls behind must not hold
// submits, and what waits here is not yet durable.
const maxIntake = 4096

// intakeUnit is one submit waiting for a cycle: workloads that are
// stored all together or not at all.
type intakeUnit struct {
	ctx  context.Context // the submitter's: done once it no longer waits
	ws   []*meridianv1.Workload
	keys []string // ws[i]'s etcd key
	vals [][]byte // ws[i] as the API encoded it
	// extra are the submit's ops other than the workloads' creates (its
	// idempotency keys, its queue's check): they commit with them.
	extra []store.Op
	done  chan intakeAnswer // buffered: the loop never blocks on it

	// Set by the cycle that took the unit.
	out      []*meridianv1.Workload // what to store for ws[i]; nil: ws[i] as it came
	outVals  [][]byte
	afters   []func() // run once the unit commits (the dispatches' bookkeeping)
	err      error    // a commit of the unit whose outcome is unknown
	answered bool
}

type intakeAnswer struct {
	ws    []*meridianv1.Workload
	taken bool
	err   error
}

func (u *intakeUnit) answer(a intakeAnswer) {
	if !u.answered {
		u.answered = true
		u.done <- a
	}
}

// Submit asks the leader's loop to store the new workloads ws in its next
// cycle. ops is the submit's whole commit: a create
// (store.PutIfModRev(key, value, 0)) of each of ws at its workload key,
// in ws's order, and the ops that must commit with them. It returns the workloads as
// stored, in ws's order, with taken true; or taken false, having stored
// nothing, when the caller must store them itself; or the error of a
// commit whose outcome is unknown. ws must not be changed once given.
func (l *Loop) Submit(ctx context.Context, ws []*meridianv1.Workload, ops []store.Op) ([]*meridianv1.Workload, bool, error) {
	u, ok := newIntakeUnit(ctx, ws, ops)
	if !ok {
		return nil, false, nil
	}
	l.mu.Lock()
	if !l.leading || l.cfg.QueueSubmits || l.intakeLen+len(ws) > maxIntake {
		l.mu.Unlock()
		return nil, false, nil
	}
	l.intake = append(l.intake, u)
	l.intakeLen += len(ws)
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
	select {
	case a := <-u.done:
		return a.ws, a.taken, a.err
	case <-ctx.Done():
		// The cycle may still store it (as the group committer may): a
		// retry with the same idempotency key finds it.
		return nil, true, ctx.Err()
	}
}

// newIntakeUnit splits ops into the creates of ws, which come in ws's
// order as the API builds them, and the rest; false when they do not
// match (the caller then commits ops itself).
func newIntakeUnit(ctx context.Context, ws []*meridianv1.Workload, ops []store.Op) (*intakeUnit, bool) {
	u := &intakeUnit{ctx: ctx, ws: ws, keys: make([]string, 0, len(ws)), vals: make([][]byte, 0, len(ws)), done: make(chan intakeAnswer, 1)}
	for _, o := range ops {
		id, isWorkload := strings.CutPrefix(o.Key(), prefWorkloads)
		if !isWorkload {
			u.extra = append(u.extra, o)
			continue
		}
		next := len(u.keys)
		if guard, isPut := o.PutGuard(); next == len(ws) || id != ws[next].GetId() || !isPut || guard != 0 {
			return nil, false
		}
		u.keys, u.vals = append(u.keys, o.Key()), append(u.vals, o.Value())
	}
	return u, len(u.keys) == len(ws) && len(ws) > 0
}

// takeIntake hands the cycle the submits waiting, each workload filed in
// the mirror as a queued workload not yet stored (revision 0: its writes
// are creates). A submitter that gave up is answered and left out, and
// so is a submit that writes a key another one taken writes, or checks a
// key at another revision than one taken does: one etcd transaction
// writes each key once (the group committer sorts such submits out). The
// mirror is locked.
func (l *Loop) takeIntake() *intakeBatch {
	l.mu.Lock()
	units := l.intake
	l.intake, l.intakeLen = nil, 0
	l.mu.Unlock()
	if len(units) == 0 {
		return nil
	}
	in := &intakeBatch{byKey: make(map[string]intakeSlot, len(units))}
	claimed := map[string]int64{} // key -> revision checked, or -1: written
	for _, u := range units {
		if err := u.ctx.Err(); err != nil {
			u.answer(intakeAnswer{taken: true, err: err})
			continue
		}
		if !claim(claimed, u) {
			u.answer(intakeAnswer{})
			continue
		}
		in.units = append(in.units, u)
		u.out, u.outVals = make([]*meridianv1.Workload, len(u.ws)), make([][]byte, len(u.ws))
		for i, k := range u.keys {
			in.byKey[k] = intakeSlot{u, i}
			l.mirror.putDecoded(l, k, store.Item{Value: u.vals[i]}, u.ws[i])
		}
	}
	return in
}

// claim records u's keys in claimed, or reports false, recording none,
// when one clashes with a submit claimed before.
func claim(claimed map[string]int64, u *intakeUnit) bool {
	want := func(o store.Op) int64 {
		if o.Writes() {
			return -1
		}
		rev, _ := o.CheckRev()
		return rev
	}
	for _, k := range u.keys {
		if _, ok := claimed[k]; ok {
			return false
		}
	}
	for _, o := range u.extra {
		if have, ok := claimed[o.Key()]; ok && (have < 0 || have != want(o)) {
			return false
		}
	}
	for _, k := range u.keys {
		claimed[k] = -1
	}
	for _, o := range u.extra {
		claimed[o.Key()] = want(o)
	}
	return true
}

// intakeBatch is the submits one cycle took.
type intakeBatch struct {
	units []*intakeUnit
	byKey map[string]intakeSlot // workload key -> where it is in its submit
}

// intakeSlot is workload i of submit u.
type intakeSlot struct {
	u *intakeUnit
	i int
}

// slot finds workload key k among the batch's submits; false for a
// stored workload.
func (in *intakeBatch) slot(k string) (intakeSlot, bool) {
	if in == nil {
		return intakeSlot{}, false
	}
	s, ok := in.byKey[k]
	return s, ok
}

// has reports whether workload key k came with one of the batch's
// submits.
func (in *intakeBatch) has(k string) bool {
	_, ok := in.slot(k)
	return ok
}

// set makes nw, encoded as b, what the cycle stores for the slot's
// workload, and after what runs once it is stored.
func (s intakeSlot) set(nw *meridianv1.Workload, b []byte, after func()) {
	s.u.out[s.i], s.u.outVals[s.i] = nw, b
	if after != nil {
		s.u.afters = append(s.u.afters, after)
	}
}

// queueWithReasons gives each workload of the batch that the cycle did
// not dispatch the pending reason the decision gave it (reasons and
// codes, by workload id; none: it is stored as submitted). The mirror is
// locked.
func (in *intakeBatch) queueWithReasons(l *Loop, reasons, codes map[string]string, now time.Time) {
	if in == nil {
		return
	}
	for _, u := range in.units {
		for i, k := range u.keys {
			w := l.mirror.workloads[k]
			if w == nil || u.out[i] != nil {
				continue
			}
			why, ok := reasons[w.id()]
			if !ok {
				continue
			}
			nw := cloneWorkload(w.doc())
			nw.Status.PendingReason, nw.Status.PendingReasonCode = clip(why, 1024), codes[w.id()]
			if b, err := l.stamp(nw, now); err == nil {
				intakeSlot{u, i}.set(nw, b, nil)
			}
		}
	}
}

// mutations are the commits of the batch's submits, one each: the
// creates of its workloads, as the cycle left them, with its other ops.
func (in *intakeBatch) mutations() []mutation {
	if in == nil {
		return nil
	}
	ms := make([]mutation, 0, len(in.units))
	for _, u := range in.units {
		m := mutation{ops: make([]store.Op, 0, len(u.keys)+len(u.extra))}
		stored := make([]*meridianv1.Workload, len(u.ws))
		for i, k := range u.keys {
			w, b := u.out[i], u.outVals[i]
			if w == nil {
				w, b = u.ws[i], u.vals[i]
			}
			stored[i] = w
			m.ops = append(m.ops, store.PutIfModRev(k, b, 0))
			m.size += len(b) + len(k)
			if i == 0 {
				m.wrote = ownPut{key: k, w: w}
			} else {
				m.more = append(m.more, ownPut{key: k, w: w})
			}
		}
		for _, o := range u.extra {
			m.ops = append(m.ops, o)
			m.size += len(o.Key()) + len(o.Value())
		}
		m.after = func() {
			for _, f := range u.afters {
				f()
			}
			u.answer(intakeAnswer{ws: stored, taken: true})
		}
		m.failed = func(err error) { u.err = err }
		ms = append(ms, m)
	}
	return ms
}

// settle answers every submit the cycle did not store: untaken (the API
// stores it) when nothing was written for sure, or with the error of a
// commit whose outcome is unknown; and takes its workloads out of the
// mirror (a commit that applied after all comes back from the watch like
// any other write). The mirror is locked.
func (in *intakeBatch) settle(l *Loop) {
	if in == nil {
		return
	}
	for _, u := range in.units {
		if u.answered {
			continue
		}
		for _, k := range u.keys {
			l.mirror.remove(k)
		}
		if u.err != nil {
			u.answer(intakeAnswer{taken: true, err: u.err})
		} else {
			u.answer(intakeAnswer{})
		}
	}
}

// declineIntake answers every submit still waiting untaken: the term
// ended before a cycle took them.
func (l *Loop) declineIntake() {
	l.mu.Lock()
	units := l.intake
	l.intake, l.intakeLen = nil, 0
	l.mu.Unlock()
	for _, u := range units {
		u.answer(intakeAnswer{})
	}
}
