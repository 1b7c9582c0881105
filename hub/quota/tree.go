package quota

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// QueueID is a queue's interned index in one Tree and its clones. RootID
// is the implicit root, the whole federation.
type QueueID int32

// ClassID is an accelerator class's interned index. It is valid for the
// Tree that returned it and for clones made after that.
type ClassID int32

// RootID is the QueueID of the implicit root (path "").
const RootID QueueID = 0

// unlimited is the internal cap of a queue that may borrow without limit.
const unlimited = math.MaxInt64

// qlim is one queue's effective quota for one class.
type qlim struct {
	nom    int64 // effective nominal
	borrow int64 // effective borrow limit, Unlimited for none
	lend   int64 // effective lend limit, Unlimited for none
	cap    int64 // nom + borrow, or unlimited
	g      int64 // reserved part of nom that is never lent: max(0, nom-lend)
	set    bool  // from an explicit or "*" entry (false: implicit default)
}

// classCol is the immutable per-class data, shared by every clone.
type classCol struct {
	lim []qlim  // by QueueID
	h0  []int64 // holdings with zero usage (reserved parts of sub-queues)
}

// classTable is the immutable set of interned classes; interning a new
// class makes a new table.
type classTable struct {
	names []string
	index map[string]ClassID
	cols  []*classCol
}

// structure is the immutable shape of the tree, shared by every clone.
type structure struct {
	paths    []string
	index    map[string]QueueID
	parent   []QueueID // RootID's parent is -1
	depth    []int8    // root 0, tenant 1, team 2, project 3
	children [][]QueueID
	leaf     []bool
	weight   []float64
	spec     []map[string]Limits // explicit limits, nil for implicit queues
	specIdx  []int               // index in the NewTree input, -1 for implicit queues
	leaves   int
	tmpl     *classCol // a class that no spec lists by name
}

type undoEntry struct {
	q QueueID
	c ClassID
	d int64
}

// Tree is the queue tree: an immutable structure shared by clones plus the
// mutable admitted usage of each queue and class. The zero value is not
// usable; build one with NewTree.
type Tree struct {
	s     *structure
	ct    *classTable
	u     [][]int64 // usage by class, then QueueID
	h     [][]int64 // holdings (see the design note) by class, then QueueID
	undo  []undoEntry
	marks int
}

// Mark is a point in a Tree's undo log; see Tree.Mark.
type Mark struct {
	pos     int
	depth   int
	classes int
}

// NewTree validates specs and builds the tree. Parents that no spec names
// are created implicitly with weight 1 and no limits of their own, which
// makes them transparent: for every class their nominal is the sum of their
// children's nominals and they may borrow without limit. An interior queue
// listed without an entry for a class (and without "*") behaves the same
// way for that class. A leaf without an entry for a class (and without "*")
// has no quota for it: nominal 0, borrow limit 0.
//
// Errors wrap ErrInvalidSpec and name the field, e.g.
// `queues[3].limits["nvidia-h100"].nominal: must be >= 0, got -5`.
func NewTree(specs []QueueSpec) (*Tree, error) {
	if err := validateSpecs(specs); err != nil {
		return nil, err
	}
	byPath := make(map[string]*QueueSpec, len(specs))
	all := map[string]bool{"": true}
	for i := range specs {
		p := specs[i].Path
		byPath[p] = &specs[i]
		for q := p; q != ""; q = parentPath(q) {
			all[q] = true
		}
	}
	if len(all)-1 > MaxQueues {
		return nil, fieldErr("queues", "make %d queues with their implicit parents, at most %d are allowed", len(all)-1, MaxQueues)
	}
	paths := sortedKeys(all) // "" (root) first; a parent sorts before its children
	n := len(paths)
	s := &structure{
		paths:    paths,
		index:    make(map[string]QueueID, n),
		parent:   make([]QueueID, n),
		depth:    make([]int8, n),
		children: make([][]QueueID, n),
		leaf:     make([]bool, n),
		weight:   make([]float64, n),
		spec:     make([]map[string]Limits, n),
		specIdx:  make([]int, n),
	}
	specIdx := make(map[string]int, len(specs))
	for i := range specs {
		specIdx[specs[i].Path] = i
	}
	for i, p := range paths {
		s.index[p] = QueueID(i)
	}
	classSet := map[string]bool{}
	for i, p := range paths {
		id := QueueID(i)
		s.weight[i] = 1
		s.specIdx[i] = -1
		if j, ok := specIdx[p]; ok {
			s.specIdx[i] = j
		}
		if p == "" {
			s.parent[i] = -1
			continue
		}
		pid := s.index[parentPath(p)]
		s.parent[i] = pid
		s.depth[i] = int8(strings.Count(p, "/") + 1)
		s.children[pid] = append(s.children[pid], id)
		if sp, ok := byPath[p]; ok {
			if sp.Weight > 0 {
				s.weight[i] = sp.Weight
			}
			if len(sp.Limits) > 0 {
				m := make(map[string]Limits, len(sp.Limits))
				for k, v := range sp.Limits {
					m[k] = v
					if k != AnyClass {
						classSet[k] = true
					}
				}
				s.spec[i] = m
			}
		}
	}
	for i := range paths {
		if i != int(RootID) && len(s.children[i]) == 0 {
			s.leaf[i] = true
			s.leaves++
		}
	}
	s.tmpl = s.resolve("")
	ct := &classTable{index: map[string]ClassID{}}
	for _, c := range sortedKeys(classSet) {
		ct.index[c] = ClassID(len(ct.names))
		ct.names = append(ct.names, c)
		ct.cols = append(ct.cols, s.resolve(c))
	}
	if err := s.checkReserves("", s.tmpl); err != nil {
		return nil, err
	}
	for i, col := range ct.cols {
		if err := s.checkReserves(ct.names[i], col); err != nil {
			return nil, err
		}
	}
	t := &Tree{s: s, ct: ct}
	for _, col := range ct.cols {
		t.u = append(t.u, make([]int64, n))
		t.h = append(t.h, append([]int64(nil), col.h0...))
	}
	return t, nil
}

// resolve computes the effective limits of every queue for class ("" for a
// class that no spec names), children before parents.
func (s *structure) resolve(class string) *classCol {
	n := len(s.paths)
	col := &classCol{lim: make([]qlim, n), h0: make([]int64, n)}
	for i := n - 1; i >= 0; i-- {
		var l Limits
		set := false
		if m := s.spec[i]; m != nil {
			if v, ok := m[class]; ok && class != "" {
				l, set = v, true
			} else if v, ok := m[AnyClass]; ok {
				l, set = v, true
			}
		}
		var sumNom, h0 int64
		for _, c := range s.children[i] {
			sumNom += col.lim[c].nom
			h0 += max(col.h0[c], col.lim[c].g)
		}
		switch {
		case i == int(RootID):
			l = Limits{Nominal: sumNom, BorrowLimit: 0, LendLimit: Unlimited}
		case set:
		case s.leaf[i] || len(s.children[i]) == 0:
			l = Limits{Nominal: 0, BorrowLimit: 0, LendLimit: 0}
		default:
			l = Limits{Nominal: sumNom, BorrowLimit: Unlimited, LendLimit: Unlimited}
		}
		q := qlim{nom: l.Nominal, borrow: l.BorrowLimit, lend: l.LendLimit, set: set}
		q.cap = unlimited
		if l.BorrowLimit != Unlimited {
			q.cap = l.Nominal + l.BorrowLimit
		}
		if l.LendLimit != Unlimited {
			q.g = max(0, l.Nominal-l.LendLimit)
		}
		col.lim[i] = q
		col.h0[i] = h0
	}
	return col
}

// checkReserves rejects a queue whose sub-queues reserve (keep from
// lending) more of class than the queue's own nominal: such a guarantee is
// not backed, and an idle tree would already break the admission rule.
func (s *structure) checkReserves(class string, col *classCol) error {
	for i := range s.paths {
		l := col.lim[i]
		if i == int(RootID) || !l.set || col.h0[i] <= l.nom {
			continue
		}
		key := class
		if _, ok := s.spec[i][class]; !ok || class == "" {
			key = AnyClass
		}
		return fieldErr(fmt.Sprintf("queues[%d].limits[%q].nominal", s.specIdx[i], key),
			"must be at least the %s GPUs its sub-queues reserve (their nominal - lendLimit), got %s",
			GPUs(col.h0[i]), GPUs(l.nom))
	}
	return nil
}

func parentPath(p string) string {
	if k := strings.LastIndexByte(p, '/'); k >= 0 {
		return p[:k]
	}
	return ""
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Clone returns an independent copy of the tree's usage that shares the
// immutable structure: O(queues x classes) int64 copies. The clone starts
// with an empty undo log.
func (t *Tree) Clone() *Tree {
	n := len(t.s.paths)
	rows := make([][]int64, 2*len(t.u))
	buf := make([]int64, 2*len(t.u)*n) // one allocation for every row
	for i := range rows {
		src := t.u[i/2]
		if i%2 == 1 {
			src = t.h[i/2]
		}
		rows[i] = buf[i*n : (i+1)*n : (i+1)*n]
		copy(rows[i], src)
	}
	c := &Tree{s: t.s, ct: t.ct, u: make([][]int64, len(t.u)), h: make([][]int64, len(t.h))}
	for i := range t.u {
		c.u[i], c.h[i] = rows[2*i], rows[2*i+1]
	}
	return c
}

// Mark opens a transaction: every Charge and Release after it is logged
// until the matching Rollback or Commit. Marks nest; close them in reverse
// order of opening.
func (t *Tree) Mark() Mark {
	t.marks++
	return Mark{pos: len(t.undo), depth: t.marks, classes: len(t.ct.names)}
}

// Rollback undoes every Charge and Release made since m, forgets classes
// interned since m, and closes m and any mark opened after it. A mark that
// was already closed is ignored.
func (t *Tree) Rollback(m Mark) {
	if m.depth <= 0 || m.depth > t.marks || m.pos > len(t.undo) {
		return
	}
	for i := len(t.undo) - 1; i >= m.pos; i-- {
		e := t.undo[i]
		t.apply(e.q, e.c, -e.d)
	}
	t.undo = t.undo[:m.pos]
	if n := m.classes; n < len(t.ct.names) {
		ct := &classTable{names: t.ct.names[:n:n], cols: t.ct.cols[:n:n], index: make(map[string]ClassID, n)}
		for i, name := range ct.names {
			ct.index[name] = ClassID(i)
		}
		t.ct = ct
		t.u, t.h = t.u[:n:n], t.h[:n:n]
	}
	t.closeMark(m)
}

// Commit keeps every change made since m and closes m and any mark opened
// after it. A mark that was already closed is ignored.
func (t *Tree) Commit(m Mark) {
	if m.depth <= 0 || m.depth > t.marks || m.pos > len(t.undo) {
		return
	}
	t.closeMark(m)
}

func (t *Tree) closeMark(m Mark) {
	t.marks = m.depth - 1
	if t.marks == 0 {
		t.undo = t.undo[:0]
	}
}

// ID returns the interned id of a queue path ("" is the root).
func (t *Tree) ID(path string) (QueueID, bool) {
	id, ok := t.s.index[path]
	return id, ok
}

// Path returns the path of a queue id, or "" for the root or an unknown id.
func (t *Tree) Path(id QueueID) string {
	if !t.validQ(id) {
		return ""
	}
	return t.s.paths[id]
}

// ClassID returns the interned id of an accelerator class, if the tree
// knows it (it is named by a spec, or was interned or charged).
func (t *Tree) ClassID(class string) (ClassID, bool) {
	id, ok := t.ct.index[class]
	return id, ok
}

// Class returns the name of a class id, or "" for an unknown id.
func (t *Tree) Class(id ClassID) string {
	if !t.validC(id) {
		return ""
	}
	return t.ct.names[id]
}

// Classes returns the interned class names in ClassID order.
func (t *Tree) Classes() []string { return append([]string(nil), t.ct.names...) }

// InternClass returns the id of class, adding it if the tree does not know
// it yet: its limits come from each queue's "*" entry, or the defaults.
// The class is known to this tree and to clones made afterwards.
func (t *Tree) InternClass(class string) (ClassID, error) {
	if id, ok := t.ct.index[class]; ok {
		return id, nil
	}
	if err := ValidateClass(class); err != nil {
		return 0, fmt.Errorf("class: %w", err)
	}
	old := t.ct
	ct := &classTable{
		names: append(old.names[:len(old.names):len(old.names)], class),
		index: make(map[string]ClassID, len(old.index)+1),
		cols:  append(old.cols[:len(old.cols):len(old.cols)], t.s.tmpl),
	}
	for k, v := range old.index {
		ct.index[k] = v
	}
	id := ClassID(len(old.names))
	ct.index[class] = id
	t.ct = ct
	t.u = append(t.u, make([]int64, len(t.s.paths)))
	t.h = append(t.h, append([]int64(nil), t.s.tmpl.h0...))
	return id, nil
}

func (t *Tree) validQ(id QueueID) bool { return id >= 0 && int(id) < len(t.s.paths) }
func (t *Tree) validC(id ClassID) bool { return id >= 0 && int(id) < len(t.ct.names) }

// Leaf reports whether path is a leaf queue, the only kind that admits
// workloads.
func (t *Tree) Leaf(path string) bool {
	id, ok := t.s.index[path]
	return ok && t.s.leaf[id]
}

// LeafID reports whether id is a leaf queue.
func (t *Tree) LeafID(id QueueID) bool { return t.validQ(id) && t.s.leaf[id] }

// Queues returns the paths of every queue (implicit parents included, the
// root excluded), sorted.
func (t *Tree) Queues() []string { return append([]string(nil), t.s.paths[1:]...) }

// Leaves returns the paths of every leaf queue, sorted.
func (t *Tree) Leaves() []string {
	out := make([]string, 0, t.s.leaves)
	for i, p := range t.s.paths {
		if t.s.leaf[i] {
			out = append(out, p)
		}
	}
	return out
}

// Children returns the sorted paths of a queue's children ("" for the
// root's, the tenants).
func (t *Tree) Children(path string) []string {
	id, ok := t.s.index[path]
	if !ok {
		return nil
	}
	out := make([]string, len(t.s.children[id]))
	for i, c := range t.s.children[id] {
		out[i] = t.s.paths[c]
	}
	return out
}

// Parent returns the path of a queue's parent ("" for a tenant) and false
// for the root or an unknown path.
func (t *Tree) Parent(path string) (string, bool) {
	id, ok := t.s.index[path]
	if !ok || id == RootID {
		return "", false
	}
	return t.s.paths[t.s.parent[id]], true
}

// Weight returns a queue's fairshare weight (1 unless its spec set one),
// or 0 for an unknown path.
func (t *Tree) Weight(path string) float64 {
	id, ok := t.s.index[path]
	if !ok {
		return 0
	}
	return t.s.weight[id]
}

// col returns the class column, or the template for an unknown class.
func (t *Tree) colFor(class string) (ClassID, *classCol, bool) {
	if id, ok := t.ct.index[class]; ok {
		return id, t.ct.cols[id], true
	}
	return -1, t.s.tmpl, false
}

// Limits returns a queue's effective limits for class: its explicit entry,
// else its "*" entry, else the default (an interior queue: the sum of its
// children's nominals, unlimited borrowing and lending; a leaf: all zero).
// For the root ("") it returns the federation's total: the sum of the
// tenants' nominals, no borrowing. ok is false for an unknown path.
func (t *Tree) Limits(path, class string) (Limits, bool) {
	id, ok := t.s.index[path]
	if !ok {
		return Limits{}, false
	}
	_, col, _ := t.colFor(class)
	q := col.lim[id]
	return Limits{Nominal: q.nom, BorrowLimit: q.borrow, LendLimit: q.lend}, true
}

// Nominal returns a queue's effective nominal quota for class (see Limits),
// or 0 for an unknown path.
func (t *Tree) Nominal(path, class string) int64 {
	l, _ := t.Limits(path, class)
	return l.Nominal
}

// Usage returns the admitted usage of a queue's subtree for class ("" is
// the whole federation), or 0 for an unknown path or class.
func (t *Tree) Usage(path, class string) int64 {
	id, ok := t.s.index[path]
	if !ok {
		return 0
	}
	c, _, known := t.colFor(class)
	if !known {
		return 0
	}
	return t.u[c][id]
}

// UsageID is Usage by ids; 0 for an unknown id.
func (t *Tree) UsageID(q QueueID, c ClassID) int64 {
	if !t.validQ(q) || !t.validC(c) {
		return 0
	}
	return t.u[c][q]
}

// Borrowing returns how far a queue's subtree usage is above its nominal
// for class, or 0 when it is not above it.
func (t *Tree) Borrowing(path, class string) int64 {
	id, ok := t.s.index[path]
	if !ok {
		return 0
	}
	c, col, known := t.colFor(class)
	if !known {
		return 0
	}
	return max(0, t.u[c][id]-col.lim[id].nom)
}

// Holding returns how much of its parent's pool a queue's subtree holds for
// class: its holdings (usage plus idle reserved quota of sub-queues that do
// not lend it) or its own reserved quota, whichever is larger. See the
// design note; for a leaf without a lend limit it equals Usage.
func (t *Tree) Holding(path, class string) int64 {
	id, ok := t.s.index[path]
	if !ok {
		return 0
	}
	c, col, known := t.colFor(class)
	h := col.h0
	if known {
		h = t.h[c]
	}
	return max(h[id], col.lim[id].g)
}
