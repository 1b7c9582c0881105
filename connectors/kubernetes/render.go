package kubernetes

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// Keys of RuntimeTemplate.extra the connector reads; everything else is
// ignored.
const (
	// ExtraPinNodes (bool) turns the hub's placement hint into required
	// node affinity. Without it the hint is only preferred.
	ExtraPinNodes = "pin_nodes"
	// ExtraPodAnnotations and ExtraPodLabels (objects of strings) are
	// added to every pod; the connector's own keys win.
	ExtraPodAnnotations = "pod_annotations"
	ExtraPodLabels      = "pod_labels"
)

// PodGroupGVR is the scheduler-plugins coscheduling PodGroup resource.
var PodGroupGVR = schema.GroupVersionResource{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Resource: "podgroups"}

// clusterView is what rendering needs to know about the cluster, taken
// from the informer caches (empty in pure unit tests).
type clusterView struct {
	// classProducts maps an accelerator class to the GFD product values
	// of the nodes that have it.
	classProducts map[string][]string
	// migProfiles seen on the nodes' allocatable resources.
	migProfiles []MIGProfile
}

// Rendered is what one dispatch becomes: one Indexed Job per pod set and,
// with the coscheduling gang, one PodGroup.
type Rendered struct {
	Jobs      []*batchv1.Job
	PodGroups []*unstructured.Unstructured
	// Modes is the fractional mode chosen per pod set ("" for whole GPUs).
	Modes []string
}

// Render turns a dispatch into Kubernetes objects. It is pure: the same
// dispatch, config and view give the same objects. A dispatch the cluster
// cannot serve (unsupported fractional mode, unknown class, bad field) is
// an agent.Reject error naming the field.
func Render(cfg Config, d *agentv1.Dispatch, view clusterView) (*Rendered, error) {
	if d.GetDispatchId() == "" {
		return nil, agent.Reject("dispatch_id: empty")
	}
	w := d.GetWorkload()
	if w == nil {
		return nil, agent.Reject("workload: missing")
	}
	sets := w.GetPodSets()
	if len(sets) == 0 || len(sets) > 16 {
		return nil, agent.Reject("workload.pod_sets: want 1..16 pod sets, got %d", len(sets))
	}
	workloadID := d.GetWorkloadId()
	if workloadID == "" {
		workloadID = w.GetId()
	}
	extra := w.GetRuntime().GetExtra().GetFields()
	pin := extra[ExtraPinNodes].GetBoolValue()
	hints := map[string][]string{}
	migHints := map[string]string{}
	for _, p := range d.GetPlacement() {
		hints[p.GetPodSet()] = append(hints[p.GetPodSet()], p.GetNodes()...)
		if p.GetMigProfile() != "" {
			migHints[p.GetPodSet()] = p.GetMigProfile()
		}
	}
	base := map[string]string{
		LabelManagedBy: ManagedByValue,
		LabelDispatch:  labelSafe(d.GetDispatchId()),
		LabelWorkload:  labelSafe(workloadID),
	}
	if cfg.ClusterID != "" {
		base[LabelCluster] = cfg.ClusterID
	}
	anns := map[string]string{
		AnnDispatchID: d.GetDispatchId(),
		AnnWorkloadID: workloadID,
		AnnPodSets:    strconv.Itoa(len(sets)),
	}
	out := &Rendered{}
	var groupName string
	var minMember int64
	if cfg.Gang == GangCoscheduling {
		groupName = JobName(d.GetDispatchId(), "gang")
	}
	names := map[string]bool{}
	for i, ps := range sets {
		field := fmt.Sprintf("workload.pod_sets[%d]", i)
		if !dnsLabel.MatchString(ps.GetName()) || len(ps.GetName()) > 63 {
			return nil, agent.Reject("%s.name %q: want a DNS-1123 label", field, ps.GetName())
		}
		if names[ps.GetName()] {
			return nil, agent.Reject("%s.name %q: duplicate pod set name", field, ps.GetName())
		}
		names[ps.GetName()] = true
		reps := ps.GetReplicas()
		if reps < 1 || reps > 10000 {
			return nil, agent.Reject("%s.replicas %d: want 1..10000", field, reps)
		}
		// The hub admitted and charged a size between min_replicas and
		// replicas (an elastic pod set); exactly that many run, and the
		// gang starts only whole at that size.
		size, err := d.PodSetSize(i)
		if err != nil {
			return nil, agent.Reject("%v", err)
		}
		reps, need := size, size
		minMember += int64(need)
		pod, mode, milli, err := renderPod(cfg, w, ps, field, hints[ps.GetName()], migHints[ps.GetName()], pin, view)
		if err != nil {
			return nil, err
		}
		out.Modes = append(out.Modes, mode)
		labels := maps.Clone(base)
		labels[LabelPodSet] = ps.GetName()
		jobAnns := maps.Clone(anns)
		jobAnns[AnnGPUMilli] = strconv.FormatInt(int64(milli)*int64(reps), 10)
		jobAnns[AnnMinReplicas] = strconv.Itoa(int(need))
		if mode != "" {
			jobAnns[AnnFractionMode] = mode
		}
		maps.Copy(pod.Labels, labels)
		maps.Copy(pod.Annotations, map[string]string{AnnDispatchID: d.GetDispatchId(), AnnWorkloadID: workloadID})
		if groupName != "" && mode != ModeKAI {
			pod.Labels[LabelPodGroup] = groupName
			pod.Spec.SchedulerName = cfg.CoschedulingSchedulerName
		}
		name := JobName(d.GetDispatchId(), ps.GetName())
		job := &batchv1.Job{
			TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cfg.Namespace, Labels: maps.Clone(labels), Annotations: jobAnns},
			Spec: batchv1.JobSpec{
				Parallelism:    ptr(reps),
				Completions:    ptr(reps),
				CompletionMode: ptr(batchv1.IndexedCompletion),
				BackoffLimit:   ptr(int32(0)), // a gang member failing fails the gang
				Template:       *pod,
			},
		}
		applyMaxRuntime(job, w)
		if cfg.FinishedTTL > 0 {
			job.Spec.TTLSecondsAfterFinished = ptr(int32(min(cfg.FinishedTTL.Seconds(), 1<<31-1)))
		}
		if cfg.Gang == GangKueue {
			job.Labels[LabelKueueQueue] = cfg.KueueQueue
			job.Spec.Suspend = ptr(true) // Kueue unsuspends it on admission
		}
		out.Jobs = append(out.Jobs, job)
	}
	if groupName != "" {
		pg := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": PodGroupGVR.GroupVersion().String(),
			"kind":       "PodGroup",
			"metadata": map[string]any{
				"name": groupName, "namespace": cfg.Namespace,
				"labels": toAny(base), "annotations": toAny(anns),
			},
			"spec": map[string]any{"minMember": minMember},
		}}
		out.PodGroups = append(out.PodGroups, pg)
	}
	return out, nil
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// renderPod builds the pod template of one pod set and returns the
// fractional mode used and the GPU milli of one replica.
//
// A MIG pod set requests nvidia.com/mig-<profile> for the profile the
// workload names, else the one the hub matched (migHint), else the
// smallest profile of the cluster that covers gpu_milli and gpu_memory_mib.
func renderPod(cfg Config, w *meridianv1.Workload, ps *meridianv1.PodSet, field string, hint []string, migHint string, pin bool, view clusterView) (*corev1.PodTemplateSpec, string, int32, error) {
	r := ps.GetResources()
	tmpl := &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}, Annotations: map[string]string{}}}
	extra := w.GetRuntime().GetExtra().GetFields()
	for k, v := range extra[ExtraPodAnnotations].GetStructValue().GetFields() {
		tmpl.Annotations[k] = v.GetStringValue()
	}
	for k, v := range extra[ExtraPodLabels].GetStructValue().GetFields() {
		if strings.HasPrefix(k, "meridian.io/") || k == LabelManagedBy {
			continue
		}
		tmpl.Labels[k] = v.GetStringValue()
	}
	spec := &tmpl.Spec
	spec.RestartPolicy = corev1.RestartPolicyNever
	spec.SchedulerName = cfg.SchedulerName
	spec.Tolerations = append(slices.Clone(cfg.Tolerations),
		corev1.Toleration{Key: ResourceGPU, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})

	c := corev1.Container{Name: "main", Image: cfg.DefaultImage}
	if ct := w.GetRuntime().GetContainer(); ct != nil {
		if ct.GetImage() != "" {
			c.Image = ct.GetImage()
		}
		c.Command = slices.Clone(ct.GetCommand())
		c.Args = slices.Clone(ct.GetArgs())
		keys := slices.Sorted(maps.Keys(ct.GetEnv()))
		for _, k := range keys {
			c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: ct.GetEnv()[k]})
		}
	}
	req := corev1.ResourceList{}
	lim := corev1.ResourceList{}
	if v := r.GetCpuMilli(); v > 0 {
		req[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(v), resource.DecimalSI)
	} else if v < 0 {
		return nil, "", 0, agent.Reject("%s.resources.cpu_milli %d: must not be negative", field, v)
	}
	if v := r.GetMemoryMib(); v > 0 {
		q := *resource.NewQuantity(int64(v)<<20, resource.BinarySI)
		req[corev1.ResourceMemory] = q
		lim[corev1.ResourceMemory] = q
	} else if v < 0 {
		return nil, "", 0, agent.Reject("%s.resources.memory_mib %d: must not be negative", field, v)
	}
	milli, mem := r.GetGpuMilli(), r.GetGpuMemoryMib()
	if milli < 0 || milli > 8000 {
		return nil, "", 0, agent.Reject("%s.resources.gpu_milli %d: want 0..8000", field, milli)
	}
	if mem < 0 {
		return nil, "", 0, agent.Reject("%s.resources.gpu_memory_mib %d: must not be negative", field, mem)
	}
	mode := ""
	setGPU := func(name corev1.ResourceName, n int64) {
		q := *resource.NewQuantity(n, resource.DecimalSI)
		req[name] = q
		lim[name] = q
	}
	migName := strings.TrimSpace(r.GetMigProfile())
	if migName == "" && r.GetFractionalMode() == meridianv1.FractionalMode_FRACTIONAL_MODE_MIG {
		migName = migHint
	}
	switch {
	case migName != "":
		if _, err := pickMode(cfg, meridianv1.FractionalMode_FRACTIONAL_MODE_MIG); err != nil {
			return nil, "", 0, agent.Reject("%s.resources.mig_profile: %v", field, err)
		}
		p, err := ParseMIGProfile(migName)
		if err != nil {
			return nil, "", 0, agent.Reject("%s.resources.mig_profile: %v", field, err)
		}
		if !slices.ContainsFunc(view.migProfiles, func(q MIGProfile) bool { return q.Name == p.Name }) {
			return nil, "", 0, agent.Reject("%s.resources.mig_profile: no node of this cluster has %s", field, p.Resource())
		}
		mode = ModeMIG
		setGPU(corev1.ResourceName(p.Resource()), 1)
		milli = p.Milli()
	case milli >= 1000:
		if milli%1000 != 0 {
			return nil, "", 0, agent.Reject("%s.resources.gpu_milli %d: above 1000 must be a multiple of 1000", field, milli)
		}
		setGPU(ResourceGPU, int64(milli/1000)*int64(cfg.SharedReplicas))
	case milli > 0 || mem > 0:
		var err error
		mode, err = pickMode(cfg, r.GetFractionalMode())
		if err != nil {
			return nil, "", 0, agent.Reject("%s.resources.fractional_mode: %v", field, err)
		}
		switch mode {
		case ModeHAMi:
			setGPU(ResourceGPU, 1)
			if milli > 0 {
				setGPU(ResourceGPUCores, int64((milli+9)/10))
			}
			if mem > 0 {
				setGPU(ResourceGPUMem, int64(mem))
			}
		case ModeKAI:
			spec.SchedulerName = cfg.KAISchedulerName
			if milli > 0 {
				tmpl.Annotations[AnnotationGPUFraction] = strconv.FormatFloat(float64(milli)/1000, 'f', -1, 64)
			} else {
				tmpl.Annotations[AnnotationGPUMemory] = strconv.Itoa(int(mem))
			}
			if cfg.KAIQueue != "" {
				tmpl.Labels[LabelKAIQueue] = cfg.KAIQueue
			}
		case ModeMIG:
			p, ok := fitMIG(view.migProfiles, milli, mem)
			if !ok {
				return nil, "", 0, agent.Reject("%s.resources: no MIG profile on this cluster fits %d milli and %d MiB", field, milli, mem)
			}
			setGPU(corev1.ResourceName(p.Resource()), 1)
			milli = p.Milli()
		case ModeTimeSlicing:
			setGPU(ResourceGPU, 1)
			if cfg.SharedReplicas > 1 {
				milli = int32(1000 / cfg.SharedReplicas)
			} else {
				milli = 1000
			}
		}
	}
	c.Resources = corev1.ResourceRequirements{Requests: req, Limits: lim}
	spec.Containers = []corev1.Container{c}

	// Affinity: the accelerator class and the pin are required; the hint is
	// only preferred; the topology keeps the replicas together.
	var required []corev1.NodeSelectorRequirement
	if class := r.GetAcceleratorClass(); class != "" && mode != ModeMIG {
		prods := slices.Clone(view.classProducts[class])
		if len(prods) == 0 {
			return nil, "", 0, agent.Reject("%s.resources.accelerator_class %q: no node of this cluster has it", field, class)
		}
		sort.Strings(prods)
		required = append(required, corev1.NodeSelectorRequirement{Key: LabelGPUProduct, Operator: corev1.NodeSelectorOpIn, Values: prods})
	}
	hint = slices.Compact(slices.Sorted(slices.Values(hint)))
	aff := &corev1.Affinity{}
	if len(hint) > 0 {
		if pin {
			required = append(required, corev1.NodeSelectorRequirement{Key: HostnameLabel, Operator: corev1.NodeSelectorOpIn, Values: hint})
		} else {
			aff.NodeAffinity = &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
				Weight:     100,
				Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: HostnameLabel, Operator: corev1.NodeSelectorOpIn, Values: hint}}},
			}}}
		}
	}
	if len(required) > 0 {
		if aff.NodeAffinity == nil {
			aff.NodeAffinity = &corev1.NodeAffinity{}
		}
		aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: required}}}
	}
	if key := topologyKey(cfg, ps.GetTopology()); key != "" && ps.GetReplicas() > 1 {
		aff.PodAffinity = &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			TopologyKey:   key,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelPodSet: ps.GetName()}},
			// The dispatch label narrows it to this gang (set on the pod below).
			MatchLabelKeys: []string{LabelDispatch},
		}}}
	}
	if aff.NodeAffinity != nil || aff.PodAffinity != nil {
		spec.Affinity = aff
	}
	return tmpl, mode, milli, nil
}

// topologyKey is the node label that a pod set's topology constraint
// keeps its replicas within ("" for none).
func topologyKey(cfg Config, t meridianv1.Topology) string {
	switch t {
	case meridianv1.Topology_TOPOLOGY_RACK:
		return cfg.RackLabel
	case meridianv1.Topology_TOPOLOGY_NVLINK_DOMAIN:
		return LabelGPUClique
	case meridianv1.Topology_TOPOLOGY_SAME_NODE:
		return HostnameLabel
	}
	return ""
}

// pickMode chooses the configured fractional mode that serves want.
func pickMode(cfg Config, want meridianv1.FractionalMode) (string, error) {
	var ok []string
	switch want {
	case meridianv1.FractionalMode_FRACTIONAL_MODE_UNSPECIFIED, meridianv1.FractionalMode_FRACTIONAL_MODE_ANY:
		ok = []string{ModeHAMi, ModeKAI, ModeMIG, ModeTimeSlicing}
	case meridianv1.FractionalMode_FRACTIONAL_MODE_MEMORY:
		ok = []string{ModeHAMi, ModeKAI}
	case meridianv1.FractionalMode_FRACTIONAL_MODE_MIG:
		ok = []string{ModeMIG}
	case meridianv1.FractionalMode_FRACTIONAL_MODE_TIME_SLICE:
		ok = []string{ModeTimeSlicing}
	default:
		return "", fmt.Errorf("%s is not supported by the kubernetes connector", want)
	}
	for _, m := range cfg.FractionalModes { // the config's order is the preference
		if slices.Contains(ok, m) {
			return m, nil
		}
	}
	return "", fmt.Errorf("%s: this cluster is configured with fractional modes %v", want, cfg.FractionalModes)
}

// fitMIG picks the smallest profile that gives milli and mem MiB.
func fitMIG(profiles []MIGProfile, milli, mem int32) (MIGProfile, bool) {
	ps := slices.Clone(profiles)
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Slices != ps[j].Slices {
			return ps[i].Slices < ps[j].Slices
		}
		return ps[i].MemGB < ps[j].MemGB
	})
	for _, p := range ps {
		if p.Milli() >= milli && int64(p.MemGB)*1024 >= int64(mem) {
			return p, true
		}
	}
	return MIGProfile{}, false
}
