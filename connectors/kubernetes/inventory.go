package kubernetes

import (
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// Node label keys the connector adds to an advertised node's labels.
const (
	LabelNodeReason = "kubernetes.meridian.io/unschedulable-reason"
)

// gpuNode is one node's GPUs being filled with the pods bound to it.
type gpuNode struct {
	gpus []*agentv1.Gpu
	// mig holds the MIG GPUs' profiles in the order of gpus[len(whole):].
	whole int
}

// BuildInventory maps nodes and the pods bound to them onto the agent's
// inventory. It is pure: listers feed it in the connector, fixtures in
// tests. Only nodes with GPUs (nvidia.com/gpu, nvidia.com/mig-* or the GFD
// count label) that match cfg.NodeSelector are advertised.
//
// Each node gets its whole GPUs (allocatable nvidia.com/gpu divided by
// SharedReplicas) first, then one GPU per MIG-partitioned GPU (GFD count
// minus whole GPUs, at least one when MIG resources exist) carrying the
// node's MIG profiles. The requests of bound, non-terminal pods are then
// charged: whole GPUs to free GPUs, fractions (HAMi cores, KAI fraction,
// shared replicas) best-fit, MIG slices to the MIG GPUs.
func BuildInventory(cfg Config, nodes []*corev1.Node, pods []*corev1.Pod) *agent.Inventory {
	inv := &agent.Inventory{Labels: maps.Clone(cfg.Labels), FractionalModes: cfg.hubModes()}
	if inv.Labels == nil {
		inv.Labels = map[string]string{}
	}
	inv.Labels[LabelConnector] = Kind
	sel := labels.SelectorFromSet(cfg.NodeSelector)
	byNode := map[string][]*corev1.Pod{}
	for _, p := range pods {
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
	}
	sorted := slices.Clone(nodes)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, n := range sorted {
		if !sel.Matches(labels.Set(n.Labels)) {
			continue
		}
		if out := buildNode(cfg, n, byNode[n.Name]); out != nil {
			inv.Nodes = append(inv.Nodes, out)
		}
	}
	// MIG slices are read from nvidia.com/mig-<profile> resources: the GPU
	// operator's mixed strategy. Without them no GPU is MIG-partitioned.
	inv.MIGStrategy = agentv1.MigStrategy_MIG_STRATEGY_NONE
	for _, n := range inv.Nodes {
		for _, g := range n.Gpus {
			if len(g.MigProfiles) > 0 {
				inv.MIGStrategy = agentv1.MigStrategy_MIG_STRATEGY_MIXED
			}
		}
	}
	return inv
}

func qty(l corev1.ResourceList, name string) int64 {
	q, ok := l[corev1.ResourceName(name)]
	if !ok {
		return 0
	}
	return q.Value()
}

func buildNode(cfg Config, n *corev1.Node, pods []*corev1.Pod) *agentv1.Node {
	alloc := n.Status.Allocatable
	migAlloc := map[string]int64{}
	for name, q := range alloc {
		if strings.HasPrefix(string(name), MIGPrefix) && q.Value() > 0 {
			if _, err := ParseMIGProfile(string(name)); err == nil {
				migAlloc[strings.TrimPrefix(string(name), MIGPrefix)] = q.Value()
			}
		}
	}
	units := qty(alloc, ResourceGPU)
	whole := units / int64(cfg.SharedReplicas)
	count, _ := strconv.ParseInt(n.Labels[LabelGPUCount], 10, 64)
	if whole == 0 && len(migAlloc) == 0 && count == 0 {
		return nil // not a GPU node
	}
	memMiB, _ := strconv.ParseInt(n.Labels[LabelGPUMemory], 10, 64)
	product := n.Labels[LabelGPUProduct]
	class := cfg.Classes[product]
	if class == "" {
		class = ClassFromProduct(product, memMiB)
	}
	out := &agentv1.Node{
		Name: n.Name, Labels: maps.Clone(n.Labels), AcceleratorClass: class,
		Rack: n.Labels[cfg.RackLabel], NvlinkDomain: n.Labels[LabelGPUClique],
		CpuMilliTotal:  alloc.Cpu().MilliValue(),
		MemoryMibTotal: alloc.Memory().Value() >> 20,
	}
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	ok, why := schedulable(cfg, n)
	out.Schedulable = ok
	if !ok {
		out.Labels[LabelNodeReason] = why
	}
	for i := int64(0); i < whole; i++ {
		out.Gpus = append(out.Gpus, &agentv1.Gpu{Index: int32(i), FreeMilli: 1000, FreeMemoryMib: memMiB, TotalMemoryMib: memMiB, Healthy: true})
	}
	// MIG GPUs: the GFD count beyond the whole GPUs, or one.
	var migGPUs []*agentv1.Gpu
	if len(migAlloc) > 0 {
		k := max(count-whole, 1)
		profs := slices.Sorted(maps.Keys(migAlloc))
		for i := int64(0); i < k; i++ {
			g := &agentv1.Gpu{Index: int32(whole + i), TotalMemoryMib: memMiB, Healthy: true}
			for _, p := range profs {
				total := migAlloc[p] / k
				if i < migAlloc[p]%k {
					total++
				}
				if total > 0 {
					g.MigProfiles = append(g.MigProfiles, &agentv1.MigSlice{Profile: p, Free: int32(total), Total: int32(total)})
				}
			}
			migGPUs = append(migGPUs, g)
		}
	}
	cpuUsed, memUsed := int64(0), int64(0)
	slices.SortFunc(pods, func(a, b *corev1.Pod) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	for _, p := range pods {
		req := podRequests(p)
		cpuUsed += req.Cpu().MilliValue()
		memUsed += req.Memory().Value() >> 20
		chargeGPUs(cfg, p, req, out.Gpus, migGPUs, memMiB)
	}
	for _, g := range migGPUs {
		// A MIG GPU's free share is its free slices' share of 7.
		slicesFree, memFree := 0, int64(0)
		for _, s := range g.MigProfiles {
			mp, _ := ParseMIGProfile(s.Profile)
			slicesFree += int(s.Free) * mp.Slices
			memFree += int64(s.Free) * int64(mp.MemGB) * 1024
		}
		g.FreeMilli = int32(min(1000, slicesFree*1000/7))
		g.FreeMemoryMib = memFree
		if memMiB > 0 {
			g.FreeMemoryMib = min(memFree, memMiB)
		}
	}
	out.Gpus = append(out.Gpus, migGPUs...)
	out.CpuMilliFree = max(0, out.CpuMilliTotal-cpuUsed)
	out.MemoryMibFree = max(0, out.MemoryMibTotal-memUsed)
	return out
}

// podRequests sums a pod's container requests (limits for extended
// resources, which must equal requests), with init containers as the
// scheduler counts them: the max of each init container and the sum.
func podRequests(p *corev1.Pod) corev1.ResourceList {
	sum := corev1.ResourceList{}
	add := func(l corev1.ResourceList) {
		for k, v := range l {
			q := sum[k]
			q.Add(v)
			sum[k] = q
		}
	}
	for _, c := range p.Spec.Containers {
		r := c.Resources.Requests
		if len(r) == 0 {
			r = c.Resources.Limits
		}
		add(r)
	}
	for _, c := range p.Spec.InitContainers {
		r := c.Resources.Requests
		if len(r) == 0 {
			r = c.Resources.Limits
		}
		for k, v := range r {
			if q, ok := sum[k]; !ok || v.Cmp(q) > 0 {
				sum[k] = v.DeepCopy()
			}
		}
	}
	return sum
}

// chargeGPUs takes one pod's GPU use off the node's GPUs.
func chargeGPUs(cfg Config, p *corev1.Pod, req corev1.ResourceList, gpus, migGPUs []*agentv1.Gpu, memMiB int64) {
	// MIG slices.
	for name, q := range req {
		if !strings.HasPrefix(string(name), MIGPrefix) {
			continue
		}
		prof := strings.TrimPrefix(string(name), MIGPrefix)
		for n := q.Value(); n > 0; n-- {
			for _, g := range migGPUs {
				if s := migSlice(g, prof); s != nil && s.Free > 0 {
					s.Free--
					break
				}
			}
		}
	}
	// KAI fractions (no nvidia.com/gpu request).
	if f, err := strconv.ParseFloat(p.Annotations[AnnotationGPUFraction], 64); err == nil && f > 0 && f <= 1 {
		m := int32(f * 1000)
		takeFraction(gpus, m, int64(float64(memMiB)*f))
		return
	}
	if mib, err := strconv.ParseInt(p.Annotations[AnnotationGPUMemory], 10, 64); err == nil && mib > 0 && memMiB > 0 {
		takeFraction(gpus, int32(min(1000, mib*1000/memMiB)), mib)
		return
	}
	units := qty(req, ResourceGPU)
	if units <= 0 {
		return
	}
	cores := qty(req, ResourceGPUCores)
	gmem := qty(req, ResourceGPUMem)
	switch {
	case cores > 0 || gmem > 0: // HAMi: each unit is a slice of one GPU
		m := int32(min(1000, cores*10))
		if cores == 0 && memMiB > 0 {
			m = int32(min(1000, gmem*1000/memMiB))
		}
		mem := gmem
		if mem == 0 {
			mem = memMiB * int64(m) / 1000
		}
		for range units {
			takeFraction(gpus, m, mem)
		}
	case cfg.SharedReplicas > 1: // shared replicas (time-slicing or HAMi split)
		m := int32(1000 / cfg.SharedReplicas)
		for range units {
			takeFraction(gpus, m, memMiB/int64(cfg.SharedReplicas))
		}
	default: // whole GPUs
		for range units {
			for _, g := range gpus {
				if g.FreeMilli == 1000 {
					g.FreeMilli, g.FreeMemoryMib = 0, 0
					break
				}
			}
		}
	}
}

// takeFraction charges m milli and mem MiB to the fullest GPU that still
// has room (best fit), or to the GPU with the most room when none has.
func takeFraction(gpus []*agentv1.Gpu, m int32, mem int64) {
	var best *agentv1.Gpu
	for _, g := range gpus {
		if g.FreeMilli >= m && (best == nil || g.FreeMilli < best.FreeMilli) {
			best = g
		}
	}
	if best == nil {
		for _, g := range gpus {
			if best == nil || g.FreeMilli > best.FreeMilli {
				best = g
			}
		}
	}
	if best == nil {
		return
	}
	best.FreeMilli = max(0, best.FreeMilli-m)
	best.FreeMemoryMib = max(0, best.FreeMemoryMib-mem)
}

func migSlice(g *agentv1.Gpu, prof string) *agentv1.MigSlice {
	for _, s := range g.MigProfiles {
		if s.Profile == prof {
			return s
		}
	}
	return nil
}

// schedulable reports whether new pods may land on n, and why not: a
// cordoned node, a node that is not Ready, or a NoSchedule/NoExecute taint
// that cfg.Tolerations do not tolerate.
func schedulable(cfg Config, n *corev1.Node) (bool, string) {
	if n.Spec.Unschedulable {
		return false, "cordoned"
	}
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status == corev1.ConditionTrue
		}
	}
	if !ready {
		return false, "not-ready"
	}
	for _, t := range n.Spec.Taints {
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if t.Key == ResourceGPU {
			continue // tolerated by every pod the connector renders
		}
		tolerated := false
		for _, tol := range cfg.Tolerations {
			if tolerates(tol, t) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			return false, "taint-" + labelSafe(t.Key)
		}
	}
	return true, ""
}

// tolerates is the scheduler's toleration match (without the
// comparison operators of newer releases).
func tolerates(tol corev1.Toleration, t corev1.Taint) bool {
	if tol.Effect != "" && tol.Effect != t.Effect {
		return false
	}
	if tol.Key != "" && tol.Key != t.Key {
		return false
	}
	switch tol.Operator {
	case corev1.TolerationOpExists:
		return true
	case "", corev1.TolerationOpEqual:
		return tol.Key != "" && tol.Value == t.Value
	}
	return false
}

// viewOf derives what rendering needs from the nodes.
func viewOf(cfg Config, nodes []*corev1.Node) clusterView {
	v := clusterView{classProducts: map[string][]string{}}
	seen := map[string]bool{}
	for _, n := range nodes {
		product := n.Labels[LabelGPUProduct]
		if product != "" {
			memMiB, _ := strconv.ParseInt(n.Labels[LabelGPUMemory], 10, 64)
			class := cfg.Classes[product]
			if class == "" {
				class = ClassFromProduct(product, memMiB)
			}
			if !slices.Contains(v.classProducts[class], product) {
				v.classProducts[class] = append(v.classProducts[class], product)
			}
		}
		for name, q := range n.Status.Allocatable {
			if p, err := ParseMIGProfile(string(name)); err == nil && q.Value() > 0 && !seen[p.Name] {
				seen[p.Name] = true
				v.migProfiles = append(v.migProfiles, p)
			}
		}
	}
	sort.Slice(v.migProfiles, func(i, j int) bool { return v.migProfiles[i].Name < v.migProfiles[j].Name })
	return v
}
