package scheduler

import (
	"fmt"
	"time"

	"github.com/meridian-gpu/meridian/hub/quota"
	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

// Fluent builders for tests, in the style of Kueue's MakeClusterQueue.

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

type clusterBuilder struct{ c Cluster }

func makeCluster(id string) *clusterBuilder {
	return &clusterBuilder{c: Cluster{ID: id, LastSeen: t0, Labels: map[string]string{}}}
}

// Nodes adds n nodes of class with gpus whole free GPUs each, in domain
// groups of perDomain nodes (0 = no NVLink domain), racks of perRack nodes.
func (b *clusterBuilder) Nodes(n, gpus int, class string, perDomain, perRack int) *clusterBuilder {
	base := len(b.c.Nodes)
	for i := 0; i < n; i++ {
		k := base + i
		node := Node{Name: fmt.Sprintf("%s-n%03d", b.c.ID, k), Res: gpufit.Node{
			Class: class, CPUMilliFree: 128000, MemMiBFree: 1 << 20,
		}}
		for g := 0; g < gpus; g++ {
			node.Res.GPUs = append(node.Res.GPUs, gpufit.GPU{FreeMilli: 1000, FreeMemMiB: 81920, TotalMemMiB: 81920})
		}
		if perDomain > 0 {
			node.NVLink = fmt.Sprintf("nvl-%d", k/perDomain)
		}
		if perRack > 0 {
			node.Rack = fmt.Sprintf("rack-%d", k/perRack)
		}
		b.c.Nodes = append(b.c.Nodes, node)
	}
	return b
}

func (b *clusterBuilder) Modes(m ...FractionalMode) *clusterBuilder {
	for _, x := range m {
		b.c.Modes |= FracModes(x)
	}
	return b
}

func (b *clusterBuilder) Label(k, v string) *clusterBuilder { b.c.Labels[k] = v; return b }
func (b *clusterBuilder) Seen(t time.Time) *clusterBuilder  { b.c.LastSeen = t; return b }
func (b *clusterBuilder) State(s ClusterState) *clusterBuilder {
	b.c.State = s
	return b
}
func (b *clusterBuilder) Obj() Cluster { return b.c }

type workloadBuilder struct{ w Workload }

func makeWorkload(id, queue string) *workloadBuilder {
	return &workloadBuilder{w: Workload{ID: id, Queue: queue, CreatedAt: t0, Preemptible: true}}
}

// PodSet adds a pod set of replicas, each with gpus GPUs of milli share.
func (b *workloadBuilder) PodSet(name string, replicas int32, gpus int32, milli int32, class string) *workloadBuilder {
	b.w.PodSets = append(b.w.PodSets, PodSet{Name: name, Replicas: replicas, Class: class,
		Req: gpufit.Request{CPUMilli: 1000, MemMiB: 1024, GPUs: gpus, Milli: milli}})
	return b
}

func (b *workloadBuilder) last() *PodSet { return &b.w.PodSets[len(b.w.PodSets)-1] }
func (b *workloadBuilder) Topology(t Topology) *workloadBuilder {
	b.last().Topology = t
	return b
}
func (b *workloadBuilder) Min(n int32) *workloadBuilder { b.last().MinReplicas = n; return b }
func (b *workloadBuilder) Mode(m FractionalMode) *workloadBuilder {
	b.last().Mode = m
	return b
}
func (b *workloadBuilder) Priority(p int32) *workloadBuilder { b.w.Priority = p; return b }
func (b *workloadBuilder) NonPreemptible() *workloadBuilder  { b.w.Preemptible = false; return b }
func (b *workloadBuilder) Created(t time.Time) *workloadBuilder {
	b.w.CreatedAt = t
	return b
}
func (b *workloadBuilder) Selector(k, v string) *workloadBuilder {
	if b.w.ClusterSelector == nil {
		b.w.ClusterSelector = map[string]string{}
	}
	b.w.ClusterSelector[k] = v
	return b
}
func (b *workloadBuilder) Avoid(c string) *workloadBuilder {
	b.w.AvoidClusters = append(b.w.AvoidClusters, c)
	return b
}
func (b *workloadBuilder) Obj() *Workload { w := b.w; return &w }

// queues builds a tree of leaf queues under one tenant "t", each with the
// given nominal GPUs of class (unlimited borrowing).
func queues(class string, nominalGPUs map[string]int64) *quota.Tree {
	specs := []quota.QueueSpec{{Path: "t", Weight: 1}}
	for _, name := range sortedKeys(nominalGPUs) {
		specs = append(specs, quota.QueueSpec{Path: "t/" + name, Weight: 1, Limits: map[string]quota.Limits{
			class: {Nominal: nominalGPUs[name] * 1000, BorrowLimit: -1, LendLimit: -1},
		}})
	}
	tree, err := quota.NewTree(specs)
	if err != nil {
		panic(err)
	}
	return tree
}

// running marks w as running on cluster with the given placement, taking
// the resources off the cluster's nodes as an agent would report them.
func running(w *Workload, c *Cluster, placement []PodSetPlacement, started time.Time) Running {
	usage := map[string]int64{}
	for _, pp := range placement {
		ps := podSetByName(w, pp.PodSet)
		for _, rp := range pp.Replicas {
			for i := range c.Nodes {
				if c.Nodes[i].Name == rp.Node {
					// copy the GPU slice so that builders never alias
					c.Nodes[i].Res.GPUs = append([]gpufit.GPU(nil), c.Nodes[i].Res.GPUs...)
					c.Nodes[i].Res.Apply(&ps.Req, rp.GPUs)
					usage[c.Nodes[i].Res.Class] += ps.Req.TotalMilli()
				}
			}
		}
	}
	r := Running{Workload: w, Cluster: c.ID, StartedAt: started, Placement: placement}
	for _, k := range sortedKeys(usage) {
		r.Usage = append(r.Usage, ClassMilli{Class: k, Milli: usage[k]})
	}
	return r
}

func wholeNode(node string, gpus int) []PodSetPlacement {
	idx := make([]int, gpus)
	for i := range idx {
		idx[i] = i
	}
	return []PodSetPlacement{{PodSet: "main", Replicas: []ReplicaPlacement{{Node: node, GPUs: idx}}}}
}

// busy marks the first n nodes of c as fully used (no free GPU).
func busy(c Cluster, n int) Cluster {
	for i := 0; i < n && i < len(c.Nodes); i++ {
		gs := append([]gpufit.GPU(nil), c.Nodes[i].Res.GPUs...)
		for g := range gs {
			gs[g].FreeMilli, gs[g].FreeMemMiB = 0, 0
		}
		c.Nodes[i].Res.GPUs = gs
	}
	return c
}

// GPUMem sets the last pod set's GPU memory per GPU.
func (b *workloadBuilder) GPUMem(mib int32) *workloadBuilder {
	b.last().Req.GPUMemMiB = mib
	return b
}

// memNodes sets every GPU of c to mib MiB of memory.
func memNodes(c Cluster, mib int32) Cluster {
	for i := range c.Nodes {
		gs := append([]gpufit.GPU(nil), c.Nodes[i].Res.GPUs...)
		for g := range gs {
			gs[g].FreeMemMiB, gs[g].TotalMemMiB = mib, mib
		}
		c.Nodes[i].Res.GPUs = gs
	}
	return c
}
