package quota

import (
	"errors"
	"fmt"
	"strconv"
)

// Verdict is the answer of Check: may `milli` more be admitted at a leaf?
type Verdict struct {
	// OK is true when every limit on the path from the leaf to the root
	// holds after admission.
	OK bool
	// Borrowed is how much of the leaf's new usage is above its nominal.
	Borrowed int64
	// Reason says, when !OK, which limit blocks and by how much, in GPUs.
	Reason string
	// Blocker is the path of the queue whose limit blocks when !OK ("" is
	// the federation as a whole, i.e. the sum of the tenants' nominals).
	Blocker string
}

// Check reports whether admitting milli more milli-GPUs of class at leaf
// would respect every limit on the path to the root (the admission rule of
// the design note). It does not change the tree. On the OK path it does not
// allocate; a class the tree has never seen is judged by the queues' "*"
// entries and defaults.
func (t *Tree) Check(leaf, class string, milli int64) Verdict {
	id, ok := t.s.index[leaf]
	if !ok {
		return Verdict{Reason: fmt.Sprintf("queue %s does not exist", quoted(leaf)), Blocker: leaf}
	}
	c, col, known := t.colFor(class)
	if !known {
		if err := ValidateClass(class); err != nil {
			return Verdict{Reason: "class " + err.Error(), Blocker: leaf}
		}
		return t.check(id, class, col, col.h0, nil, milli)
	}
	return t.check(id, class, col, t.h[c], t.u[c], milli)
}

// CheckID is Check by interned ids.
func (t *Tree) CheckID(q QueueID, c ClassID, milli int64) Verdict {
	if !t.validQ(q) {
		return Verdict{Reason: fmt.Sprintf("queue id %d does not exist", q)}
	}
	if !t.validC(c) {
		return Verdict{Reason: fmt.Sprintf("class id %d does not exist", c), Blocker: t.s.paths[q]}
	}
	return t.check(q, t.ct.names[c], t.ct.cols[c], t.h[c], t.u[c], milli)
}

// FitsID is CheckID without the reason: it never allocates.
func (t *Tree) FitsID(q QueueID, c ClassID, milli int64) bool {
	if !t.validQ(q) || !t.validC(c) || !t.s.leaf[q] || milli < 0 || milli > MaxMilli {
		return false
	}
	_, _, ok := t.walk(q, t.ct.cols[c], t.h[c], milli)
	return ok
}

// Fits is Check without the reason: it never allocates.
func (t *Tree) Fits(leaf, class string, milli int64) bool {
	id, ok := t.s.index[leaf]
	if !ok || !t.s.leaf[id] || milli < 0 || milli > MaxMilli {
		return false
	}
	c, col, known := t.colFor(class)
	h := col.h0
	if known {
		h = t.h[c]
	} else if ValidateClass(class) != nil {
		return false
	}
	_, _, ok = t.walk(id, col, h, milli)
	return ok
}

// walk applies the admission rule: it adds milli to the leaf's holdings and
// propagates the change of each node's contribution to its parent, failing
// at the first node whose holdings would exceed its cap.
func (t *Tree) walk(q QueueID, col *classCol, h []int64, milli int64) (at QueueID, newH int64, ok bool) {
	d := milli
	for n := q; ; {
		hn := h[n] + d
		l := &col.lim[n]
		if hn > l.cap {
			return n, hn, false
		}
		p := t.s.parent[n]
		if p < 0 {
			return 0, 0, true
		}
		d = max(hn, l.g) - max(h[n], l.g)
		if d == 0 {
			return 0, 0, true
		}
		n = p
	}
}

func (t *Tree) check(q QueueID, class string, col *classCol, h, u []int64, milli int64) Verdict {
	path := t.s.paths[q]
	if !t.s.leaf[q] {
		return Verdict{Reason: fmt.Sprintf("queue %s is not a leaf queue; submit to one of its leaves", quoted(path)), Blocker: path}
	}
	if milli < 0 {
		return Verdict{Reason: fmt.Sprintf("milli: must be >= 0, got %d", milli), Blocker: path}
	}
	if milli > MaxMilli {
		return Verdict{Reason: fmt.Sprintf("milli: must be <= %d, got %d", MaxMilli, milli), Blocker: path}
	}
	var used int64
	if u != nil {
		used = u[q]
	}
	at, hn, ok := t.walk(q, col, h, milli)
	if ok {
		return Verdict{OK: true, Borrowed: max(0, used+milli-col.lim[q].nom)}
	}
	v := Verdict{Borrowed: max(0, used+milli-col.lim[q].nom), Blocker: t.s.paths[at]}
	v.Reason = t.reason(q, at, class, col, h, u, hn-h[at], milli)
	return v
}

// reason explains why node at blocks an admission of milli at leaf q; d is
// how much at's holdings would grow.
func (t *Tree) reason(q, at QueueID, class string, col *classCol, h, u []int64, d, milli int64) string {
	l := col.lim[at]
	held := h[at]
	var used int64
	if u != nil {
		used = u[at]
	}
	heldText := GPUs(held) + " of " + GPUs(l.cap) + " GPUs"
	if held != used {
		heldText = GPUs(held) + " of " + GPUs(l.cap) + " GPUs held (" + GPUs(used) + " in use + " + GPUs(held-used) + " reserved by sub-queues that do not lend it)"
	}
	req := ", " + GPUs(milli) + " more requested"
	if d != milli {
		req = ", " + GPUs(milli) + " more requested (" + GPUs(d) + " more held here)"
	}
	if at == RootID {
		return "the federation has no idle " + class + " quota to lend: total usage " + heldText + " (sum of tenant nominals)" + req
	}
	path := t.s.paths[at]
	if at == q {
		if l.nom == 0 && l.borrow == 0 {
			return "queue " + path + " has no " + class + " quota (nominal 0, borrow limit 0)" + req
		}
		return "queue " + path + " would exceed its " + class + " limit: " + heldText + " (nominal " + GPUs(l.nom) + " + borrow limit " + GPUs(l.borrow) + ")" + req
	}
	return levelName(t.s.depth[at]) + " " + path + " has no idle " + class + " quota to lend: cohort usage " + heldText + " (nominal " + GPUs(l.nom) + " + borrow limit " + GPUs(l.borrow) + ")" + req
}

func levelName(depth int8) string {
	switch depth {
	case 1:
		return "tenant"
	case 2:
		return "team"
	default:
		return "queue"
	}
}

func quoted(p string) string {
	if p == "" {
		return `""`
	}
	return p
}

// GPUs formats milli-GPUs as GPUs with up to three decimals: 12500 is
// "12.5", 64000 is "64", 125 is "0.125".
func GPUs(milli int64) string {
	if milli == unlimited {
		return "unlimited"
	}
	neg := milli < 0
	if neg {
		milli = -milli
	}
	s := strconv.FormatInt(milli/1000, 10)
	if f := milli % 1000; f != 0 {
		frac := []byte{byte('0' + f/100), byte('0' + f/10%10), byte('0' + f%10)}
		for frac[len(frac)-1] == '0' {
			frac = frac[:len(frac)-1]
		}
		s += "." + string(frac)
	}
	if neg {
		s = "-" + s
	}
	return s
}

// Charge adds admitted usage of class at leaf: work already running, or a
// workload that Check admitted. It does not check limits. Invalid input (an
// unknown or interior queue, a bad class name, a negative amount or one
// above MaxMilli) is ignored; use TryCharge to get the error.
func (t *Tree) Charge(leaf, class string, milli int64) { _ = t.TryCharge(leaf, class, milli) }

// Release removes usage of class at leaf, never below zero. Invalid input
// is ignored; use TryRelease to get the error.
func (t *Tree) Release(leaf, class string, milli int64) { _ = t.TryRelease(leaf, class, milli) }

// TryCharge is Charge that reports invalid input as an error naming the
// argument. An unknown but valid class is interned.
func (t *Tree) TryCharge(leaf, class string, milli int64) error {
	q, c, err := t.resolveArgs(leaf, class, milli, true)
	if err != nil {
		return err
	}
	t.applyLogged(q, c, milli)
	return nil
}

// TryRelease is Release that reports invalid input as an error naming the
// argument. Releasing more than the leaf uses releases all of it and is
// reported as an error after the release.
func (t *Tree) TryRelease(leaf, class string, milli int64) error {
	q, c, err := t.resolveArgs(leaf, class, milli, false)
	if err != nil {
		return err
	}
	if c < 0 {
		return fmt.Errorf("class: %q has no usage at %s to release", class, leaf)
	}
	return t.release(q, c, milli)
}

// ChargeID is Charge by interned ids; invalid ids or amounts are ignored.
func (t *Tree) ChargeID(q QueueID, c ClassID, milli int64) {
	if t.validQ(q) && t.validC(c) && t.s.leaf[q] && milli >= 0 && milli <= MaxMilli {
		t.applyLogged(q, c, milli)
	}
}

// ReleaseID is Release by interned ids; invalid ids or amounts are ignored.
func (t *Tree) ReleaseID(q QueueID, c ClassID, milli int64) {
	if t.validQ(q) && t.validC(c) && t.s.leaf[q] && milli >= 0 && milli <= MaxMilli {
		_ = t.release(q, c, milli)
	}
}

var errOverRelease = errors.New("milli: released more than the queue uses; released all of it")

func (t *Tree) release(q QueueID, c ClassID, milli int64) error {
	d := min(milli, t.u[c][q])
	t.applyLogged(q, c, -d)
	if d < milli {
		return fmt.Errorf("%w (%s of %s GPUs at %s)", errOverRelease, GPUs(d), GPUs(milli), t.s.paths[q])
	}
	return nil
}

func (t *Tree) resolveArgs(leaf, class string, milli int64, intern bool) (QueueID, ClassID, error) {
	q, ok := t.s.index[leaf]
	switch {
	case !ok:
		return 0, 0, fmt.Errorf("leaf: queue %s does not exist", quoted(leaf))
	case !t.s.leaf[q]:
		return 0, 0, fmt.Errorf("leaf: queue %s is not a leaf queue", quoted(leaf))
	case milli < 0:
		return 0, 0, fmt.Errorf("milli: must be >= 0, got %d", milli)
	case milli > MaxMilli:
		return 0, 0, fmt.Errorf("milli: must be <= %d, got %d", MaxMilli, milli)
	}
	c, ok := t.ct.index[class]
	if ok {
		return q, c, nil
	}
	if !intern {
		if err := ValidateClass(class); err != nil {
			return 0, 0, fmt.Errorf("class: %w", err)
		}
		return q, -1, nil
	}
	c, err := t.InternClass(class)
	return q, c, err
}

func (t *Tree) applyLogged(q QueueID, c ClassID, d int64) {
	if d == 0 {
		return
	}
	if t.marks > 0 {
		t.undo = append(t.undo, undoEntry{q: q, c: c, d: d})
	}
	t.apply(q, c, d)
}

// apply adds d to the usage of leaf q and every ancestor, and propagates the
// change of holdings up the tree.
func (t *Tree) apply(q QueueID, c ClassID, d int64) {
	u, h, lim := t.u[c], t.h[c], t.ct.cols[c].lim
	dh := d
	for n := q; n >= 0; n = t.s.parent[n] {
		u[n] += d
		if dh != 0 {
			old := h[n]
			h[n] += dh
			g := lim[n].g
			dh = max(h[n], g) - max(old, g)
		}
	}
}
