package validation

import (
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// Fluent test builders, in the style of Kueue's MakeClusterQueue(...).Obj().

type workloadBuilder struct{ w *meridianv1.Workload }

// makeWorkload returns a builder for a valid one-pod-set workload.
func makeWorkload(queue string) *workloadBuilder {
	return &workloadBuilder{w: &meridianv1.Workload{
		Name:  "train-resnet",
		Queue: queue,
		PodSets: []*meridianv1.PodSet{
			makePodSet("worker", 2).GPU(1000).Obj(),
		},
		Runtime: &meridianv1.RuntimeTemplate{Kind: &meridianv1.RuntimeTemplate_Container{
			Container: &meridianv1.ContainerTemplate{Image: "ghcr.io/acme/train:1.2", Args: []string{"--epochs=3"}},
		}},
	}}
}

func (b *workloadBuilder) PodSets(ps ...*meridianv1.PodSet) *workloadBuilder {
	b.w.PodSets = ps
	return b
}

func (b *workloadBuilder) Label(k, v string) *workloadBuilder {
	if b.w.Labels == nil {
		b.w.Labels = map[string]string{}
	}
	b.w.Labels[k] = v
	return b
}

func (b *workloadBuilder) Selector(k, v string) *workloadBuilder {
	if b.w.ClusterSelector == nil {
		b.w.ClusterSelector = map[string]string{}
	}
	b.w.ClusterSelector[k] = v
	return b
}

func (b *workloadBuilder) Mutate(f func(*meridianv1.Workload)) *workloadBuilder {
	f(b.w)
	return b
}

func (b *workloadBuilder) Obj() *meridianv1.Workload { return b.w }

type podSetBuilder struct{ p *meridianv1.PodSet }

func makePodSet(name string, replicas int32) *podSetBuilder {
	return &podSetBuilder{p: &meridianv1.PodSet{
		Name:      name,
		Replicas:  replicas,
		Resources: &meridianv1.Resources{CpuMilli: 4000, MemoryMib: 16384},
	}}
}

func (b *podSetBuilder) GPU(milli int32) *podSetBuilder {
	b.p.Resources.GpuMilli = milli
	return b
}

func (b *podSetBuilder) GPUMemory(mib int32) *podSetBuilder {
	b.p.Resources.GpuMemoryMib = mib
	return b
}

func (b *podSetBuilder) Class(c string) *podSetBuilder {
	b.p.Resources.AcceleratorClass = c
	return b
}

func (b *podSetBuilder) Mode(m meridianv1.FractionalMode) *podSetBuilder {
	b.p.Resources.FractionalMode = m
	return b
}

func (b *podSetBuilder) Topology(t meridianv1.Topology) *podSetBuilder {
	b.p.Topology = t
	return b
}

func (b *podSetBuilder) Min(n int32) *podSetBuilder {
	b.p.MinReplicas = n
	return b
}

func (b *podSetBuilder) Obj() *meridianv1.PodSet { return b.p }

func makeQueue(path string) *meridianv1.Queue {
	borrow := int64(4000)
	lend := int64(2000)
	return &meridianv1.Queue{
		Path:   path,
		Weight: 2,
		Quotas: []*meridianv1.QueueQuota{
			{AcceleratorClass: "nvidia-h100-80gb", NominalMilliGpus: 8000, BorrowLimitMilli: &borrow, LendLimitMilli: &lend},
			{AcceleratorClass: "nvidia-a100-40gb", NominalMilliGpus: 16000},
		},
	}
}
