package kubernetes

import (
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// dispatchBuilder builds test dispatches fluently.
type dispatchBuilder struct{ d *agentv1.Dispatch }

func makeDispatch(id string) *dispatchBuilder {
	return &dispatchBuilder{d: &agentv1.Dispatch{DispatchId: id, WorkloadId: "wl-" + id,
		Workload: &meridianv1.Workload{Id: "wl-" + id, Queue: "t/team/p"}}}
}

func (b *dispatchBuilder) PodSet(name string, replicas, gpuMilli int32) *dispatchBuilder {
	b.d.Workload.PodSets = append(b.d.Workload.PodSets, &meridianv1.PodSet{Name: name, Replicas: replicas,
		Resources: &meridianv1.Resources{GpuMilli: gpuMilli, CpuMilli: 500, MemoryMib: 1024}})
	return b
}

func (b *dispatchBuilder) last() *meridianv1.PodSet {
	return b.d.Workload.PodSets[len(b.d.Workload.PodSets)-1]
}

func (b *dispatchBuilder) GPUMem(mib int32) *dispatchBuilder {
	b.last().Resources.GpuMemoryMib = mib
	return b
}
func (b *dispatchBuilder) Mode(m meridianv1.FractionalMode) *dispatchBuilder {
	b.last().Resources.FractionalMode = m
	return b
}
func (b *dispatchBuilder) Class(c string) *dispatchBuilder {
	b.last().Resources.AcceleratorClass = c
	return b
}
func (b *dispatchBuilder) MinReplicas(n int32) *dispatchBuilder {
	b.last().MinReplicas = n
	return b
}
func (b *dispatchBuilder) Topology(t meridianv1.Topology) *dispatchBuilder {
	b.last().Topology = t
	return b
}

// Admitted sets the size the hub admitted for podSet (placement replicas).
func (b *dispatchBuilder) Admitted(podSet string, n int32) *dispatchBuilder {
	b.d.Placement = append(b.d.Placement, &agentv1.PodSetPlacement{PodSet: podSet, Replicas: n})
	return b
}

func (b *dispatchBuilder) Hint(podSet string, nodes ...string) *dispatchBuilder {
	b.d.Placement = append(b.d.Placement, &agentv1.PodSetPlacement{PodSet: podSet, Nodes: nodes})
	return b
}
func (b *dispatchBuilder) Container(image string, cmd ...string) *dispatchBuilder {
	b.runtime().Kind = &meridianv1.RuntimeTemplate_Container{Container: &meridianv1.ContainerTemplate{Image: image, Command: cmd, Env: map[string]string{"B": "2", "A": "1"}}}
	return b
}
func (b *dispatchBuilder) Extra(m map[string]any) *dispatchBuilder {
	s, err := structpb.NewStruct(m)
	if err != nil {
		panic(err)
	}
	b.runtime().Extra = s
	return b
}
func (b *dispatchBuilder) runtime() *meridianv1.RuntimeTemplate {
	if b.d.Workload.Runtime == nil {
		b.d.Workload.Runtime = &meridianv1.RuntimeTemplate{}
	}
	return b.d.Workload.Runtime
}
func (b *dispatchBuilder) Obj() *agentv1.Dispatch { return b.d }

// nodeBuilder builds test nodes.
type nodeBuilder struct{ n *corev1.Node }

func makeNode(name string) *nodeBuilder {
	return &nodeBuilder{n: &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{HostnameLabel: name}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}}
}

func (b *nodeBuilder) GPUs(product string, memMiB string, n int) *nodeBuilder {
	b.n.Labels[LabelGPUProduct] = product
	b.n.Labels[LabelGPUMemory] = memMiB
	b.n.Status.Allocatable[ResourceGPU] = *resource.NewQuantity(int64(n), resource.DecimalSI)
	return b
}
func (b *nodeBuilder) Label(k, v string) *nodeBuilder { b.n.Labels[k] = v; return b }
func (b *nodeBuilder) Res(name string, n int64) *nodeBuilder {
	b.n.Status.Allocatable[corev1.ResourceName(name)] = *resource.NewQuantity(n, resource.DecimalSI)
	return b
}
func (b *nodeBuilder) Cordon() *nodeBuilder { b.n.Spec.Unschedulable = true; return b }
func (b *nodeBuilder) NotReady() *nodeBuilder {
	b.n.Status.Conditions[0].Status = corev1.ConditionFalse
	return b
}
func (b *nodeBuilder) Taint(key string) *nodeBuilder {
	b.n.Spec.Taints = append(b.n.Spec.Taints, corev1.Taint{Key: key, Value: "x", Effect: corev1.TaintEffectNoSchedule})
	return b
}
func (b *nodeBuilder) Obj() *corev1.Node { return b.n }

// podBuilder builds test pods.
type podBuilder struct{ p *corev1.Pod }

func makePod(name, node string) *podBuilder {
	return &podBuilder{p: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{}, Annotations: map[string]string{},
			CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))},
		Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}}
}

func (b *podBuilder) Req(name string, q string) *podBuilder {
	c := &b.p.Spec.Containers[0]
	if c.Resources.Requests == nil {
		c.Resources.Requests = corev1.ResourceList{}
	}
	c.Resources.Requests[corev1.ResourceName(name)] = resource.MustParse(q)
	return b
}
func (b *podBuilder) Ann(k, v string) *podBuilder         { b.p.Annotations[k] = v; return b }
func (b *podBuilder) Label(k, v string) *podBuilder       { b.p.Labels[k] = v; return b }
func (b *podBuilder) Phase(p corev1.PodPhase) *podBuilder { b.p.Status.Phase = p; return b }
func (b *podBuilder) Exit(code int32) *podBuilder {
	b.p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}}
	return b
}
func (b *podBuilder) Disrupted(reason string) *podBuilder {
	b.p.Status.Conditions = append(b.p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: reason})
	return b
}
func (b *podBuilder) Obj() *corev1.Pod { return b.p }

// jobBuilder builds test Jobs as Render would label them.
type jobBuilder struct{ j *batchv1.Job }

func makeJob(name, dispatch string, podSets, replicas int32) *jobBuilder {
	return &jobBuilder{j: &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
			Labels: map[string]string{LabelManagedBy: ManagedByValue, LabelDispatch: dispatch},
			Annotations: map[string]string{AnnDispatchID: dispatch, AnnWorkloadID: "wl-" + dispatch,
				AnnPodSets: itoa(podSets), AnnGPUMilli: itoa(replicas * 1000)}},
		Spec: batchv1.JobSpec{Parallelism: ptr(replicas), Completions: ptr(replicas)},
	}}
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

func (b *jobBuilder) Started(t time.Time) *jobBuilder {
	b.j.Status.StartTime = &metav1.Time{Time: t}
	return b
}
func (b *jobBuilder) Cond(t batchv1.JobConditionType, reason string, at time.Time) *jobBuilder {
	b.j.Status.Conditions = append(b.j.Status.Conditions, batchv1.JobCondition{Type: t, Status: corev1.ConditionTrue, Reason: reason, Message: "msg", LastTransitionTime: metav1.NewTime(at)})
	if t == batchv1.JobComplete {
		b.j.Status.CompletionTime = &metav1.Time{Time: at}
	}
	return b
}
func (b *jobBuilder) Obj() *batchv1.Job { return b.j }

// jobPod is a pod of job j at completion index i.
func jobPod(j *batchv1.Job, i int, node string) *podBuilder {
	return makePod(j.Name+"-"+itoa(int32(i)), node).Label(batchv1.JobNameLabel, j.Name).Label(LabelManagedBy, ManagedByValue).
		Label(LabelDispatch, j.Labels[LabelDispatch]).Ann(batchv1.JobCompletionIndexAnnotation, itoa(int32(i)))
}

func mustCfg(c Config) Config {
	out, err := c.withDefaults()
	if err != nil {
		panic(err)
	}
	return out
}
