package convert

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/meridian-gpu/meridian/hub/scheduler"
	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// clampInt32 keeps agent-reported int64 figures inside the scheduler's int32
// fields.
func clampInt32(v int64) int32 {
	switch {
	case v < 0:
		return 0
	case v > math.MaxInt32:
		return math.MaxInt32
	}
	return int32(v)
}

// Node turns one advertised node into the scheduler's node. An unschedulable
// node, and every unhealthy GPU, offer no capacity (they stay listed so that
// a placement hint naming them still resolves). GPUs are ordered by index.
// A GPU that lists MIG profiles becomes a MIG GPU, read as under the mixed
// strategy (see NodeMIG).
func Node(n *agentv1.Node) (scheduler.Node, error) {
	return NodeMIG(n, agentv1.MigStrategy_MIG_STRATEGY_MIXED)
}

// NodeMIG is Node under the cluster's MIG strategy: with NONE no GPU may
// list MIG profiles, with SINGLE a GPU lists one profile; MIXED and
// UNSPECIFIED take any layout. Profile names must parse ("3g.40gb"); free
// counts are clamped to 0..total when a total is given.
func NodeMIG(n *agentv1.Node, strategy agentv1.MigStrategy) (scheduler.Node, error) {
	if n == nil {
		return scheduler.Node{}, fmt.Errorf("node: is nil")
	}
	if n.GetName() == "" {
		return scheduler.Node{}, fmt.Errorf("name: is empty")
	}
	sn := scheduler.Node{
		Name:   n.GetName(),
		Rack:   n.GetRack(),
		NVLink: n.GetNvlinkDomain(),
		Res: gpufit.Node{
			Class:        n.GetAcceleratorClass(),
			CPUMilliFree: max(0, n.GetCpuMilliFree()),
			MemMiBFree:   max(0, n.GetMemoryMibFree()),
		},
	}
	// Agents list GPUs by index: sort a copy only when they do not (the
	// hub converts every advertised node at each advertisement).
	gpus := n.GetGpus()
	if !slices.IsSortedFunc(gpus, byIndex) {
		gpus = slices.Clone(gpus)
		slices.SortStableFunc(gpus, byIndex)
	}
	if len(gpus) > 0 {
		sn.Res.GPUs = make([]gpufit.GPU, 0, len(gpus))
	}
	for i, g := range gpus {
		if g == nil {
			return scheduler.Node{}, fmt.Errorf("gpus[%d]: is nil", i)
		}
		if g.GetIndex() != int32(i) {
			return scheduler.Node{}, fmt.Errorf("gpus[%d].index: want indices 0..%d without gaps or repeats, got %d", i, len(gpus)-1, g.GetIndex())
		}
		if g.GetFreeMilli() < 0 || g.GetFreeMilli() > gpufit.MilliPerGPU {
			return scheduler.Node{}, fmt.Errorf("gpus[%d].free_milli: must be in 0..%d, got %d", i, gpufit.MilliPerGPU, g.GetFreeMilli())
		}
		gg := gpufit.GPU{
			FreeMilli:   g.GetFreeMilli(),
			FreeMemMiB:  clampInt32(g.GetFreeMemoryMib()),
			TotalMemMiB: clampInt32(g.GetTotalMemoryMib()),
		}
		if !g.GetHealthy() || !n.GetSchedulable() {
			gg.FreeMilli, gg.FreeMemMiB = 0, 0
		}
		if len(g.GetMigProfiles()) > 0 {
			m, err := migGPU(g, strategy, gg.FreeMilli > 0 || gg.FreeMemMiB > 0)
			if err != nil {
				return scheduler.Node{}, fmt.Errorf("gpus[%d].%w", i, err)
			}
			sn.Res.MIG = append(sn.Res.MIG, m)
			gg.MIG = int32(len(sn.Res.MIG))
		}
		sn.Res.GPUs = append(sn.Res.GPUs, gg)
	}
	if !n.GetSchedulable() {
		sn.Res.CPUMilliFree, sn.Res.MemMiBFree = 0, 0
	}
	return sn, nil
}

func byIndex(a, b *agentv1.Gpu) int { return cmp.Compare(a.GetIndex(), b.GetIndex()) }

// migGPU reads one GPU's MIG layout. A GPU that offers nothing (unhealthy,
// on a closed node) keeps its profiles with no free instance.
func migGPU(g *agentv1.Gpu, strategy agentv1.MigStrategy, open bool) (gpufit.MIGGPU, error) {
	profs := g.GetMigProfiles()
	switch {
	case strategy == agentv1.MigStrategy_MIG_STRATEGY_NONE:
		return gpufit.MIGGPU{}, fmt.Errorf("mig_profiles: the cluster's mig_strategy is NONE, yet %d profiles are listed", len(profs))
	case strategy == agentv1.MigStrategy_MIG_STRATEGY_SINGLE && len(profs) > 1:
		return gpufit.MIGGPU{}, fmt.Errorf("mig_profiles: the cluster's mig_strategy is SINGLE (one profile per GPU), got %d profiles", len(profs))
	}
	var m gpufit.MIGGPU
	for j, s := range profs {
		p, err := gpufit.ParseMIGProfile(s.GetProfile())
		if err != nil {
			return gpufit.MIGGPU{}, fmt.Errorf("mig_profiles[%d].profile: %w", j, err)
		}
		for _, prev := range m.Slots {
			if prev.Profile == p {
				return gpufit.MIGGPU{}, fmt.Errorf("mig_profiles[%d].profile: %s is listed twice", j, p)
			}
		}
		free := max(0, s.GetFree())
		if t := s.GetTotal(); t > 0 {
			free = min(free, t)
		}
		if !open {
			free = 0
		}
		m.Slots = append(m.Slots, gpufit.MIGSlot{Profile: p, Free: free})
	}
	return m, nil
}

// Cluster turns a full advertisement into the scheduler's cluster with the
// given state and freshness. Nodes are sorted by name. Errors name the node
// and field.
func Cluster(ad *agentv1.Advertisement, state scheduler.ClusterState, lastSeen time.Time) (scheduler.Cluster, error) {
	return cluster(ad, state, lastSeen, nil)
}

// ClusterReusing is Cluster for an advertisement that differs from the one
// prev was converted from only in the nodes named in changed: every other
// node's conversion is taken from prev rather than done again. A delta
// touches a few nodes of a cluster of hundreds, and converting them all
// on each one was most of what applying it cost.
func ClusterReusing(ad *agentv1.Advertisement, state scheduler.ClusterState, lastSeen time.Time, prev scheduler.Cluster, changed map[string]bool) (scheduler.Cluster, error) {
	return cluster(ad, state, lastSeen, func(name string) (scheduler.Node, bool) {
		if changed[name] {
			return scheduler.Node{}, false
		}
		i, ok := slices.BinarySearchFunc(prev.Nodes, name, func(n scheduler.Node, name string) int { return strings.Compare(n.Name, name) })
		if !ok {
			return scheduler.Node{}, false
		}
		return prev.Nodes[i], true
	})
}

// cluster converts ad, taking a node's conversion from reuse when it has one.
func cluster(ad *agentv1.Advertisement, state scheduler.ClusterState, lastSeen time.Time, reuse func(name string) (scheduler.Node, bool)) (scheduler.Cluster, error) {
	if ad == nil {
		return scheduler.Cluster{}, fmt.Errorf("advertisement: is nil")
	}
	if ad.GetClusterId() == "" {
		return scheduler.Cluster{}, fmt.Errorf("cluster_id: is empty")
	}
	c := scheduler.Cluster{ID: ad.GetClusterId(), State: state, LastSeen: lastSeen}
	if len(ad.GetLabels()) > 0 {
		c.Labels = make(map[string]string, len(ad.GetLabels()))
		for k, v := range ad.GetLabels() {
			c.Labels[k] = v
		}
	}
	modes, bad := Modes(ad.GetFractionalModes())
	if len(bad) > 0 {
		return scheduler.Cluster{}, fmt.Errorf("%s", bad[0])
	}
	c.Modes = modes
	c.Nodes = make([]scheduler.Node, 0, len(ad.GetNodes()))
	for i, n := range ad.GetNodes() {
		sn, ok := scheduler.Node{}, false
		if reuse != nil {
			sn, ok = reuse(n.GetName())
		}
		if !ok {
			var err error
			if sn, err = NodeMIG(n, ad.GetMigStrategy()); err != nil {
				return scheduler.Cluster{}, fmt.Errorf("nodes[%d].%w", i, err)
			}
		}
		c.Nodes = append(c.Nodes, sn)
	}
	byName := func(a, b scheduler.Node) int { return strings.Compare(a.Name, b.Name) }
	if !slices.IsSortedFunc(c.Nodes, byName) {
		slices.SortStableFunc(c.Nodes, byName)
	}
	// Sorted, a name listed twice is two neighbours; the error names the
	// second listing, as the advertisement orders them.
	for i := 1; i < len(c.Nodes); i++ {
		if name := c.Nodes[i].Name; name == c.Nodes[i-1].Name {
			return scheduler.Cluster{}, fmt.Errorf("nodes[%d].name: %q is listed twice", secondListing(ad.GetNodes(), name), name)
		}
	}
	return c, nil
}

// State maps the scheduler's cluster state to the API's.
func State(s scheduler.ClusterState) meridianv1.ClusterState {
	switch s {
	case scheduler.ClusterDraining:
		return meridianv1.ClusterState_CLUSTER_STATE_DRAINING
	case scheduler.ClusterLost:
		return meridianv1.ClusterState_CLUSTER_STATE_LOST
	}
	return meridianv1.ClusterState_CLUSTER_STATE_READY
}

// secondListing is the index of the second node named name in nodes.
func secondListing(nodes []*agentv1.Node, name string) int {
	seen := false
	for i, n := range nodes {
		if n.GetName() == name {
			if seen {
				return i
			}
			seen = true
		}
	}
	return -1
}

// Capacity summarises an advertisement per accelerator class: total and free
// milli-GPUs, node count and whole free GPUs, sorted by class. CPU-only
// nodes are left out. Unhealthy GPUs count in the total but not as free.
func Capacity(ad *agentv1.Advertisement) []*meridianv1.ClassCapacity {
	by := map[string]*meridianv1.ClassCapacity{}
	for _, n := range ad.GetNodes() {
		if len(n.GetGpus()) == 0 {
			continue
		}
		cls := n.GetAcceleratorClass()
		cc := by[cls]
		if cc == nil {
			cc = &meridianv1.ClassCapacity{AcceleratorClass: cls}
			by[cls] = cc
		}
		cc.Nodes++
		for _, g := range n.GetGpus() {
			cc.TotalMilli += gpufit.MilliPerGPU
			if !g.GetHealthy() || !n.GetSchedulable() {
				continue
			}
			free := min(max(g.GetFreeMilli(), 0), gpufit.MilliPerGPU)
			cc.FreeMilli += int64(free)
			if free == gpufit.MilliPerGPU {
				cc.FreeWholeGpus++
			}
		}
	}
	out := make([]*meridianv1.ClassCapacity, 0, len(by))
	for _, cc := range by {
		out = append(out, cc)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].AcceleratorClass < out[b].AcceleratorClass })
	return out
}
