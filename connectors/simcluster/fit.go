package simcluster

import (
	"fmt"
	"slices"
	"strings"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// fitReplica works out what one replica with resources r would take from n,
// without changing n. ok is false with a reason when it does not fit.
//
// mp, when set, is the MIG profile the replica needs: only a MIG GPU with a
// free instance of it serves the replica. Without it, MIG GPUs serve nothing.
func (c *Cluster) fitReplica(n *node, r *meridianv1.Resources, mp *migProfile) (charge, bool, string) {
	ch := charge{n: n, cpu: int64(r.GetCpuMilli()), mem: int64(r.GetMemoryMib())}
	if n.cordoned {
		return ch, false, fmt.Sprintf("node %s: not schedulable (cordoned)", n.name)
	}
	if ch.cpu > n.cpuFree {
		return ch, false, fmt.Sprintf("node %s: cpu %dm free, %dm needed", n.name, n.cpuFree, ch.cpu)
	}
	if ch.mem > n.memFree {
		return ch, false, fmt.Sprintf("node %s: memory %d MiB free, %d MiB needed", n.name, n.memFree, ch.mem)
	}
	milli, gmem := r.GetGpuMilli(), int64(r.GetGpuMemoryMib())
	if mp != nil {
		return c.fitMIG(n, r, mp, ch)
	}
	if milli == 0 && gmem == 0 {
		return ch, true, ""
	}
	if len(n.gpus) == 0 {
		return ch, false, fmt.Sprintf("node %s: has no GPUs", n.name)
	}
	if cls := r.GetAcceleratorClass(); cls != "" && cls != n.class {
		return ch, false, fmt.Sprintf("node %s: accelerator class %s, %s needed", n.name, n.class, cls)
	}
	if milli >= 1000 {
		want := int(milli / 1000)
		for i, g := range n.gpus {
			if g.mig == nil && g.freeMilli == 1000 && g.freeMem == g.totalMem && g.totalMem >= gmem {
				ch.gpus = append(ch.gpus, gpuCharge{idx: i, milli: 1000, mem: g.totalMem, mig: -1})
				if len(ch.gpus) == want {
					return ch, true, ""
				}
			}
		}
		return ch, false, fmt.Sprintf("node %s: %d whole GPUs free, %d needed", n.name, len(ch.gpus), want)
	}
	// Fractional: milli < 1000, or memory only.
	if len(c.modes) == 0 {
		return ch, false, "the cluster supports no fractional GPU modes"
	}
	if m := r.GetFractionalMode(); m != meridianv1.FractionalMode_FRACTIONAL_MODE_ANY && m != meridianv1.FractionalMode_FRACTIONAL_MODE_UNSPECIFIED && !slices.Contains(c.modes, m) {
		return ch, false, fmt.Sprintf("fractional mode %s is not supported here", ModeName(m))
	}
	best := -1
	var bestMem int64
	for i, g := range n.gpus {
		need := gmem
		if need == 0 {
			need = g.totalMem * int64(milli) / 1000
		}
		if g.mig != nil || g.freeMilli < milli || g.freeMem < need {
			continue
		}
		// Best fit: the GPU with the least free share left.
		if best < 0 || g.freeMilli < n.gpus[best].freeMilli {
			best, bestMem = i, need
		}
	}
	if best < 0 {
		return ch, false, fmt.Sprintf("node %s: no GPU has %d milli and the memory free", n.name, milli)
	}
	ch.gpus = append(ch.gpus, gpuCharge{idx: best, milli: milli, mem: bestMem, mig: -1})
	return ch, true, ""
}

// fitMIG takes one free instance of mp on the fullest MIG GPU that has one.
func (c *Cluster) fitMIG(n *node, r *meridianv1.Resources, mp *migProfile, ch charge) (charge, bool, string) {
	if cls := r.GetAcceleratorClass(); cls != "" && cls != n.class {
		return ch, false, fmt.Sprintf("node %s: accelerator class %s, %s needed", n.name, n.class, cls)
	}
	best, bestInst := -1, -1
	for i, g := range n.gpus {
		for k, m := range g.mig {
			if m.p.name != mp.name || m.free == 0 || g.freeMilli < mp.milli() {
				continue
			}
			if best < 0 || g.freeMilli < n.gpus[best].freeMilli {
				best, bestInst = i, k
			}
		}
	}
	if best < 0 {
		return ch, false, fmt.Sprintf("node %s: no free MIG %s instance", n.name, mp.name)
	}
	mem := min(int64(mp.memGB)*1024, n.gpus[best].freeMem)
	ch.gpus = append(ch.gpus, gpuCharge{idx: best, milli: mp.milli(), mem: mem, mig: bestInst})
	return ch, true, ""
}

// migFor is the MIG profile a pod set's replicas need here: the one the
// workload names, else the one the hub matched (the placement hint's
// mig_profile), else, for a profile-less MIG request on a cluster with MIG
// GPUs, the smallest profile of the cluster that covers gpu_milli and
// gpu_memory_mib (the hub's rule). nil means not a MIG request. An error
// is a request this cluster can never serve.
func (c *Cluster) migFor(r *meridianv1.Resources, hinted string) (*migProfile, error) {
	name := strings.TrimSpace(r.GetMigProfile())
	if name == "" {
		name = hinted
	}
	if name != "" {
		p, ok := parseMIG(name)
		if !ok {
			return nil, fmt.Errorf("mig_profile %q: not a MIG profile such as 3g.40gb", name)
		}
		if !slices.Contains(c.modes, meridianv1.FractionalMode_FRACTIONAL_MODE_MIG) {
			return nil, fmt.Errorf("mig_profile %s: this cluster has no MIG GPUs", name)
		}
		return &p, nil
	}
	if r.GetFractionalMode() != meridianv1.FractionalMode_FRACTIONAL_MODE_MIG {
		return nil, nil
	}
	var best *migProfile
	for _, n := range c.nodes {
		for _, g := range n.gpus {
			for _, m := range g.mig {
				p := m.p
				if p.milli() >= r.GetGpuMilli() && int64(p.memGB)*1024 >= int64(r.GetGpuMemoryMib()) &&
					(best == nil || p.slices < best.slices || (p.slices == best.slices && p.memGB < best.memGB)) {
					best = &p
				}
			}
		}
	}
	if best == nil && c.strategy != agentv1.MigStrategy_MIG_STRATEGY_NONE {
		return nil, fmt.Errorf("fractional_mode MIG: no MIG profile of this cluster gives %d milli and %d MiB", r.GetGpuMilli(), r.GetGpuMemoryMib())
	}
	return best, nil // nil: no MIG GPUs, a milli share as before
}

// place finds nodes for every replica of every pod set: the hub's hint if it
// still fits, otherwise anywhere in the cluster that honours each pod set's
// topology. On success the charges are applied; on failure nothing is.
func (c *Cluster) place(wl *meridianv1.Workload, hint []*agentv1.PodSetPlacement) ([]charge, []string, error) {
	if charges, nodes, reason := c.placeHint(wl, hint); reason == "" {
		return charges, nodes, nil
	} else if len(hint) > 0 {
		c.log.Debug("simcluster placement hint no longer fits; placing elsewhere", "workload_id", wl.GetId(), "reason", reason)
	}
	var all []charge
	var nodes []string
	undo := func() {
		for i := len(all) - 1; i >= 0; i-- {
			all[i].release()
		}
	}
	for i, ps := range wl.GetPodSets() {
		mp, err := c.migFor(ps.GetResources(), hintMIG(hint, ps.GetName()))
		if err != nil {
			undo()
			return nil, nil, fmt.Errorf("pod_sets[%d] (%s): %w", i, ps.GetName(), err)
		}
		want := 0 // no hint: full size, else min_replicas
		if len(hint) > 0 {
			// The hub admitted and charged a size: exactly that many run.
			n, err := (&agentv1.Dispatch{Workload: wl, Placement: hint}).PodSetSize(i)
			if err != nil {
				undo()
				return nil, nil, err
			}
			want = int(n)
		}
		chs, reason := c.placePodSet(ps, mp, want)
		if reason != "" {
			undo()
			return nil, nil, fmt.Errorf("does not fit: pod_sets[%d] (%s): %s", i, ps.GetName(), reason)
		}
		all = append(all, chs...)
		for _, ch := range chs {
			nodes = append(nodes, ch.n.name)
		}
	}
	return all, nodes, nil
}

// placeHint applies the hub's placement hint, or nothing with a reason.
func (c *Cluster) placeHint(wl *meridianv1.Workload, hint []*agentv1.PodSetPlacement) ([]charge, []string, string) {
	if len(hint) == 0 {
		return nil, nil, "no placement hint"
	}
	byName := map[string]*agentv1.PodSetPlacement{}
	for _, h := range hint {
		byName[h.GetPodSet()] = h
	}
	var all []charge
	var nodes []string
	fail := func(reason string) ([]charge, []string, string) {
		for i := len(all) - 1; i >= 0; i-- {
			all[i].release()
		}
		return nil, nil, reason
	}
	for i, ps := range wl.GetPodSets() {
		h := byName[ps.GetName()]
		if h == nil && i < len(hint) && hint[i].GetPodSet() == "" {
			h = hint[i]
		}
		if h == nil {
			return fail(fmt.Sprintf("no hint for pod set %s", ps.GetName()))
		}
		size, err := (&agentv1.Dispatch{Workload: wl, Placement: hint}).PodSetSize(i)
		if err != nil {
			return fail(err.Error())
		}
		if len(h.GetNodes()) != int(size) {
			return fail(fmt.Sprintf("hint for pod set %s names %d nodes for the %d replicas admitted", ps.GetName(), len(h.GetNodes()), size))
		}
		mp, err := c.migFor(ps.GetResources(), h.GetMigProfile())
		if err != nil {
			return fail(err.Error())
		}
		for _, name := range h.GetNodes() {
			n := c.byName[name]
			if n == nil {
				return fail(fmt.Sprintf("hinted node %s does not exist", name))
			}
			ch, ok, reason := c.fitReplica(n, ps.GetResources(), mp)
			if !ok {
				return fail(reason)
			}
			ch.apply()
			all = append(all, ch)
			nodes = append(nodes, name)
		}
	}
	return all, nodes, ""
}

// placePodSet places want replicas of ps (0: all of them or, for an
// elastic pod set, at least min_replicas) inside one topology group;
// charges are applied on success.
func (c *Cluster) placePodSet(ps *meridianv1.PodSet, mp *migProfile, want int) ([]charge, string) {
	counts := []int{int(ps.GetReplicas())}
	if m := int(ps.GetMinReplicas()); m > 0 && m < counts[0] {
		counts = append(counts, m)
	}
	if want > 0 {
		counts = []int{want}
	}
	var reasons []string
	for _, want := range counts {
		for _, group := range c.groups(ps.GetTopology()) {
			chs, reason := c.placeIn(group, ps.GetResources(), mp, want)
			if reason == "" {
				return chs, ""
			}
			reasons = append(reasons, reason)
		}
	}
	if len(reasons) == 0 {
		return nil, "no nodes"
	}
	return nil, firstReasons(reasons, 3)
}

// placeIn places want replicas on the nodes of group, first fit, packing
// each node before moving on.
func (c *Cluster) placeIn(group []*node, r *meridianv1.Resources, mp *migProfile, want int) ([]charge, string) {
	var chs []charge
	last := ""
	for _, n := range group {
		for len(chs) < want {
			ch, ok, reason := c.fitReplica(n, r, mp)
			if !ok {
				last = reason
				break
			}
			ch.apply()
			chs = append(chs, ch)
		}
		if len(chs) == want {
			return chs, ""
		}
	}
	for i := len(chs) - 1; i >= 0; i-- {
		chs[i].release()
	}
	if last == "" {
		last = "no capacity"
	}
	return nil, fmt.Sprintf("%d of %d replicas placed; %s", len(chs), want, last)
}

// groups splits the nodes into the sets one pod set may spread over.
func (c *Cluster) groups(t meridianv1.Topology) [][]*node {
	switch t {
	case meridianv1.Topology_TOPOLOGY_SAME_NODE:
		out := make([][]*node, len(c.nodes))
		for i, n := range c.nodes {
			out[i] = []*node{n}
		}
		return out
	case meridianv1.Topology_TOPOLOGY_RACK, meridianv1.Topology_TOPOLOGY_NVLINK_DOMAIN:
		key := func(n *node) string {
			if t == meridianv1.Topology_TOPOLOGY_RACK {
				return n.rack
			}
			return n.nvlink
		}
		var out [][]*node
		idx := map[string]int{}
		for _, n := range c.nodes {
			k := key(n)
			if k == "" { // not in any rack/domain: a group of its own
				out = append(out, []*node{n})
				continue
			}
			i, ok := idx[k]
			if !ok {
				i = len(out)
				idx[k] = i
				out = append(out, nil)
			}
			out[i] = append(out[i], n)
		}
		return out
	default:
		return [][]*node{c.nodes}
	}
}

// hintMIG is the MIG profile the hub's hint names for a pod set.
func hintMIG(hint []*agentv1.PodSetPlacement, podSet string) string {
	for _, h := range hint {
		if h.GetPodSet() == podSet {
			return h.GetMigProfile()
		}
	}
	return ""
}

func firstReasons(rs []string, n int) string {
	seen := map[string]bool{}
	var out []string
	for _, r := range rs {
		if !seen[r] && len(out) < n {
			seen[r] = true
			out = append(out, r)
		}
	}
	s := strings.Join(out, "; ")
	if len(rs) > len(out) {
		s += fmt.Sprintf(" (and %d more)", len(rs)-len(out))
	}
	return s
}
