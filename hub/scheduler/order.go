package scheduler

import (
	"sort"
	"strings"
	"time"

	"github.com/meridian-gpu/meridian/hub/quota"
)

// fairOrder hands out pending workloads in fairshare order, hierarchically
// in the style of Slurm's Fair Tree: starting at the root, it descends into
// the active child with the lowest usage per unit of weight (the highest
// level fairshare S/U), down to a leaf queue, and takes that queue's next
// workload by priority, then age, then id.
//
// Usage is the ledger's decayed GPU-seconds plus the allocation the queue
// holds now (and gains during this cycle) counted over a horizon, so a queue
// that has just been given a lot in this cycle steps back at once instead of
// winning every pick until the ledger catches up.
type fairOrder struct {
	nodes []fairNode
}

type fairNode struct {
	path     string
	parent   int32
	children []int32
	weight   float64
	usage    float64
	active   int32 // leaves below with work left (or 1 for an active leaf)
	queue    []*Workload
	next     int
}

// newFairOrder builds the order for the pending workloads of known leaf
// queues. alloc maps leaf queues to the milli-GPUs they hold now.
func newFairOrder(pending []*Workload, tree *quota.Tree, ledger *quota.Ledger, now time.Time, alloc map[string]int64, horizon time.Duration) *fairOrder {
	fo := &fairOrder{nodes: []fairNode{{path: "", parent: -1, weight: 1}}}
	index := map[string]int32{"": 0}
	var ensure func(path string) int32
	ensure = func(path string) int32 {
		if i, ok := index[path]; ok {
			return i
		}
		parentPath := ""
		if k := strings.LastIndexByte(path, '/'); k >= 0 {
			parentPath = path[:k]
		}
		parent := ensure(parentPath)
		i := int32(len(fo.nodes))
		w := tree.Weight(path)
		if w <= 0 {
			w = 1
		}
		u := 0.0
		if ledger != nil {
			u = ledger.Usage(path, now)
		}
		fo.nodes = append(fo.nodes, fairNode{path: path, parent: parent, weight: w, usage: u})
		fo.nodes[parent].children = append(fo.nodes[parent].children, i)
		index[path] = i
		return i
	}
	for _, w := range pending {
		leaf := ensure(w.Queue)
		fo.nodes[leaf].queue = append(fo.nodes[leaf].queue, w)
	}
	// Current allocation, counted over the horizon, joins the ledger usage.
	leaves := make([]string, 0, len(alloc))
	for q := range alloc {
		leaves = append(leaves, q)
	}
	sort.Strings(leaves)
	for _, q := range leaves {
		if i, ok := index[q]; ok {
			fo.addUsage(i, alloc[q], horizon)
		} else {
			// The queue has no pending work, but its ancestors may.
			for p := parentOf(q); ; p = parentOf(p) {
				if j, ok := index[p]; ok {
					fo.addUsage(j, alloc[q], horizon)
					break
				}
				if p == "" {
					break
				}
			}
		}
	}
	for i := range fo.nodes {
		n := &fo.nodes[i]
		sort.Slice(n.children, func(a, b int) bool { return fo.nodes[n.children[a]].path < fo.nodes[n.children[b]].path })
		if len(n.queue) > 0 {
			sortQueue(n.queue)
			for j := int32(i); j >= 0; j = fo.nodes[j].parent {
				fo.nodes[j].active++
			}
		}
	}
	return fo
}

func parentOf(path string) string {
	if k := strings.LastIndexByte(path, '/'); k >= 0 {
		return path[:k]
	}
	return ""
}

// sortQueue orders one leaf's workloads: priority, then age, then id.
func sortQueue(ws []*Workload) {
	sort.Slice(ws, func(a, b int) bool { return QueueOrder(ws[a], ws[b]) })
}

// addUsage adds an allocation of milli-GPUs, held over horizon, to node i
// and its ancestors.
func (fo *fairOrder) addUsage(i int32, milli int64, horizon time.Duration) {
	u := float64(milli) / 1000 * horizon.Seconds()
	for ; i >= 0; i = fo.nodes[i].parent {
		fo.nodes[i].usage += u
	}
}

// next returns the next workload and its leaf node, or nil when none is left.
func (fo *fairOrder) next() (*Workload, int32) {
	if fo.nodes[0].active == 0 {
		return nil, -1
	}
	i := int32(0)
	for len(fo.nodes[i].children) > 0 || fo.nodes[i].queue == nil {
		best := int32(-1)
		for _, c := range fo.nodes[i].children {
			if fo.nodes[c].active == 0 {
				continue
			}
			if best < 0 || fo.less(c, best) {
				best = c
			}
		}
		if best < 0 {
			break
		}
		i = best
		if len(fo.nodes[i].queue) > 0 && len(fo.nodes[i].children) == 0 {
			break
		}
	}
	n := &fo.nodes[i]
	w := n.queue[n.next]
	n.next++
	if n.next == len(n.queue) {
		for j := i; j >= 0; j = fo.nodes[j].parent {
			fo.nodes[j].active--
		}
	}
	return w, i
}

// less reports whether sibling a is more deserving than sibling b: lower
// usage per weight (higher level fairshare), then higher weight, then path.
func (fo *fairOrder) less(a, b int32) bool {
	x, y := &fo.nodes[a], &fo.nodes[b]
	l, r := x.usage*y.weight, y.usage*x.weight
	if l != r {
		return l < r
	}
	if x.weight != y.weight {
		return x.weight > y.weight
	}
	return x.path < y.path
}
