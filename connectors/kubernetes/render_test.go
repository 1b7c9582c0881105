package kubernetes

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

func limits(j *batchv1.Job) map[string]string {
	out := map[string]string{}
	for k, v := range j.Spec.Template.Spec.Containers[0].Resources.Limits {
		if k == corev1.ResourceMemory {
			out[string(k)] = v.String()
		} else {
			out[string(k)] = strconv.FormatInt(v.Value(), 10)
		}
	}
	return out
}

func TestRenderWholeGPUGang(t *testing.T) {
	cfg := mustCfg(Config{ClusterID: "k1", Namespace: "ml"})
	d := makeDispatch("d-0a1b").PodSet("workers", 2, 4000).Container("img:1", "train").Obj()
	r, err := Render(cfg, d, clusterView{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Jobs) != 1 || len(r.PodGroups) != 0 {
		t.Fatalf("jobs %d podgroups %d, want 1 and 0", len(r.Jobs), len(r.PodGroups))
	}
	j := r.Jobs[0]
	if j.Name != "mrd-d-0a1b-workers" || j.Namespace != "ml" {
		t.Fatalf("name %s/%s", j.Namespace, j.Name)
	}
	if *j.Spec.Parallelism != 2 || *j.Spec.Completions != 2 || *j.Spec.CompletionMode != batchv1.IndexedCompletion || *j.Spec.BackoffLimit != 0 {
		t.Fatalf("spec: parallelism %d completions %d mode %s backoff %d", *j.Spec.Parallelism, *j.Spec.Completions, *j.Spec.CompletionMode, *j.Spec.BackoffLimit)
	}
	for _, l := range []map[string]string{j.Labels, j.Spec.Template.Labels} {
		if l[LabelDispatch] != "d-0a1b" || l[LabelWorkload] != "wl-d-0a1b" || l[LabelManagedBy] != ManagedByValue || l[LabelCluster] != "k1" || l[LabelPodSet] != "workers" {
			t.Fatalf("labels %v", l)
		}
	}
	if j.Annotations[AnnPodSets] != "1" || j.Annotations[AnnGPUMilli] != "8000" || j.Annotations[AnnDispatchID] != "d-0a1b" {
		t.Fatalf("annotations %v", j.Annotations)
	}
	if got := limits(j); got[ResourceGPU] != "4" || got["memory"] != "1Gi" {
		t.Fatalf("limits %v", got)
	}
	c := j.Spec.Template.Spec.Containers[0]
	if c.Image != "img:1" || !reflect.DeepEqual(c.Command, []string{"train"}) || len(c.Env) != 2 || c.Env[0].Name != "A" {
		t.Fatalf("container %+v", c)
	}
	if j.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Fatalf("restart policy %s", j.Spec.Template.Spec.RestartPolicy)
	}
	again, _ := Render(cfg, d, clusterView{})
	if !reflect.DeepEqual(again.Jobs, r.Jobs) {
		t.Fatal("rendering the same dispatch twice differs")
	}
}

func TestRenderFractionalModes(t *testing.T) {
	view := clusterView{migProfiles: []MIGProfile{{"3g.40gb", 3, 40}, {"1g.10gb", 1, 10}}}
	tests := map[string]struct {
		modes    []string
		want     meridianv1.FractionalMode
		milli    int32
		mem      int32
		limits   map[string]string // GPU-ish limits expected (memory excluded)
		anns     map[string]string
		sched    string
		chosen   string
		rejected string
		profile  string // Resources.mig_profile
		hinted   string // the placement hint's mig_profile
	}{
		"mig named profile": {modes: []string{ModeMIG}, profile: "3g.40gb",
			limits: map[string]string{"nvidia.com/mig-3g.40gb": "1"}, chosen: ModeMIG},
		"mig named profile beats the smallest fit": {modes: []string{ModeMIG}, want: meridianv1.FractionalMode_FRACTIONAL_MODE_MIG, milli: 100, profile: "3g.40gb",
			limits: map[string]string{"nvidia.com/mig-3g.40gb": "1"}, chosen: ModeMIG},
		"mig profile the hub matched": {modes: []string{ModeMIG}, want: meridianv1.FractionalMode_FRACTIONAL_MODE_MIG, milli: 100, hinted: "3g.40gb",
			limits: map[string]string{"nvidia.com/mig-3g.40gb": "1"}, chosen: ModeMIG},
		"mig named profile absent":       {modes: []string{ModeMIG}, profile: "2g.20gb", rejected: "no node of this cluster has nvidia.com/mig-2g.20gb"},
		"mig named profile, mig not set": {modes: []string{ModeHAMi}, profile: "3g.40gb", rejected: "mig_profile"},
		"hami cores and memory": {modes: []string{ModeHAMi}, want: meridianv1.FractionalMode_FRACTIONAL_MODE_MEMORY, milli: 250, mem: 20000,
			limits: map[string]string{ResourceGPU: "1", ResourceGPUCores: "25", ResourceGPUMem: "20000"}, chosen: ModeHAMi},
		"hami memory only": {modes: []string{ModeHAMi}, mem: 8192,
			limits: map[string]string{ResourceGPU: "1", ResourceGPUMem: "8192"}, chosen: ModeHAMi},
		"kai fraction": {modes: []string{ModeKAI}, want: meridianv1.FractionalMode_FRACTIONAL_MODE_MEMORY, milli: 500,
			limits: map[string]string{}, anns: map[string]string{AnnotationGPUFraction: "0.5"}, sched: "kai-scheduler", chosen: ModeKAI},
		"kai memory": {modes: []string{ModeKAI}, mem: 10240,
			limits: map[string]string{}, anns: map[string]string{AnnotationGPUMemory: "10240"}, sched: "kai-scheduler", chosen: ModeKAI},
		"mig smallest fit": {modes: []string{ModeMIG}, want: meridianv1.FractionalMode_FRACTIONAL_MODE_MIG, milli: 100, mem: 9000,
			limits: map[string]string{"nvidia.com/mig-1g.10gb": "1"}, chosen: ModeMIG},
		"mig bigger profile": {modes: []string{ModeMIG}, milli: 300, mem: 20000,
			limits: map[string]string{"nvidia.com/mig-3g.40gb": "1"}, chosen: ModeMIG},
		"mig none fits": {modes: []string{ModeMIG}, milli: 900, rejected: "no MIG profile"},
		"time slicing": {modes: []string{ModeTimeSlicing}, want: meridianv1.FractionalMode_FRACTIONAL_MODE_TIME_SLICE, milli: 250,
			limits: map[string]string{ResourceGPU: "1"}, chosen: ModeTimeSlicing},
		"any takes the first configured": {modes: []string{ModeTimeSlicing, ModeHAMi}, want: meridianv1.FractionalMode_FRACTIONAL_MODE_ANY, milli: 500,
			limits: map[string]string{ResourceGPU: "1"}, chosen: ModeTimeSlicing},
		"memory skips time slicing": {modes: []string{ModeTimeSlicing, ModeKAI}, want: meridianv1.FractionalMode_FRACTIONAL_MODE_MEMORY, milli: 500,
			limits: map[string]string{}, anns: map[string]string{AnnotationGPUFraction: "0.5"}, sched: "kai-scheduler", chosen: ModeKAI},
		"mode not configured": {modes: []string{ModeHAMi}, want: meridianv1.FractionalMode_FRACTIONAL_MODE_MIG, milli: 100, rejected: "fractional_mode"},
		"mps unsupported":     {modes: []string{ModeHAMi}, want: meridianv1.FractionalMode_FRACTIONAL_MODE_MPS, milli: 100, rejected: "not supported"},
		"no modes at all":     {milli: 500, rejected: "fractional_mode"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := mustCfg(Config{FractionalModes: tc.modes})
			d := makeDispatch("d-1").PodSet("w", 1, tc.milli).GPUMem(tc.mem).Mode(tc.want).Obj()
			d.Workload.PodSets[0].Resources.MigProfile = tc.profile
			if tc.hinted != "" {
				d.Placement = []*agentv1.PodSetPlacement{{PodSet: "w", MigProfile: tc.hinted}}
			}
			r, err := Render(cfg, d, view)
			if tc.rejected != "" {
				if !agent.IsRejected(err) || !strings.Contains(err.Error(), tc.rejected) || !strings.Contains(err.Error(), "pod_sets[0]") {
					t.Fatalf("err = %v, want a rejection naming the field and containing %q", err, tc.rejected)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := limits(r.Jobs[0])
			delete(got, "memory")
			if !reflect.DeepEqual(got, tc.limits) {
				t.Fatalf("limits %v, want %v", got, tc.limits)
			}
			tmpl := r.Jobs[0].Spec.Template
			for k, v := range tc.anns {
				if tmpl.Annotations[k] != v {
					t.Fatalf("annotation %s = %q, want %q (all: %v)", k, tmpl.Annotations[k], v, tmpl.Annotations)
				}
			}
			if tmpl.Spec.SchedulerName != tc.sched {
				t.Fatalf("schedulerName %q, want %q", tmpl.Spec.SchedulerName, tc.sched)
			}
			if r.Modes[0] != tc.chosen || r.Jobs[0].Annotations[AnnFractionMode] != tc.chosen {
				t.Fatalf("mode %q / annotation %q, want %q", r.Modes[0], r.Jobs[0].Annotations[AnnFractionMode], tc.chosen)
			}
			// Extended resources: requests equal limits.
			for k, v := range tmpl.Spec.Containers[0].Resources.Limits {
				if q := tmpl.Spec.Containers[0].Resources.Requests[k]; q.Cmp(v) != 0 {
					t.Fatalf("%s: request %s != limit %s", k, q.String(), v.String())
				}
			}
		})
	}
}

func TestRenderPlacementAndTopology(t *testing.T) {
	view := clusterView{classProducts: map[string][]string{"nvidia-h100-80gb": {"NVIDIA-H100-80GB-HBM3"}}}
	tests := map[string]struct {
		d            *dispatchBuilder
		preferred    []string
		required     map[string][]string
		podAffinity  string
		rejectedWith string
	}{
		"hint is only preferred": {d: makeDispatch("d-1").PodSet("w", 2, 1000).Hint("w", "n2", "n1"), preferred: []string{"n1", "n2"}},
		"pin makes it required": {d: makeDispatch("d-1").PodSet("w", 2, 1000).Hint("w", "n1", "n1").Extra(map[string]any{ExtraPinNodes: true}),
			required: map[string][]string{HostnameLabel: {"n1"}}},
		"class is required": {d: makeDispatch("d-1").PodSet("w", 1, 1000).Class("nvidia-h100-80gb"),
			required: map[string][]string{LabelGPUProduct: {"NVIDIA-H100-80GB-HBM3"}}},
		"unknown class":                 {d: makeDispatch("d-1").PodSet("w", 1, 1000).Class("nvidia-b200-180gb"), rejectedWith: "accelerator_class"},
		"rack topology":                 {d: makeDispatch("d-1").PodSet("w", 2, 1000).Topology(meridianv1.Topology_TOPOLOGY_RACK), podAffinity: DefaultRackLabel},
		"nvlink topology":               {d: makeDispatch("d-1").PodSet("w", 2, 1000).Topology(meridianv1.Topology_TOPOLOGY_NVLINK_DOMAIN), podAffinity: LabelGPUClique},
		"same node":                     {d: makeDispatch("d-1").PodSet("w", 2, 1000).Topology(meridianv1.Topology_TOPOLOGY_SAME_NODE), podAffinity: HostnameLabel},
		"one replica needs no affinity": {d: makeDispatch("d-1").PodSet("w", 1, 1000).Topology(meridianv1.Topology_TOPOLOGY_RACK)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r, err := Render(mustCfg(Config{}), tc.d.Obj(), view)
			if tc.rejectedWith != "" {
				if !agent.IsRejected(err) || !strings.Contains(err.Error(), tc.rejectedWith) {
					t.Fatalf("err = %v, want rejection with %q", err, tc.rejectedWith)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			aff := r.Jobs[0].Spec.Template.Spec.Affinity
			var pref []string
			req := map[string][]string{}
			podKey := ""
			if aff != nil && aff.NodeAffinity != nil {
				for _, p := range aff.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
					pref = append(pref, p.Preference.MatchExpressions[0].Values...)
				}
				if rq := aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution; rq != nil {
					for _, e := range rq.NodeSelectorTerms[0].MatchExpressions {
						req[e.Key] = e.Values
					}
				}
			}
			if aff != nil && aff.PodAffinity != nil {
				podKey = aff.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey
			}
			if !reflect.DeepEqual(pref, tc.preferred) {
				t.Fatalf("preferred %v, want %v", pref, tc.preferred)
			}
			if tc.required == nil {
				tc.required = map[string][]string{}
			}
			if !reflect.DeepEqual(req, tc.required) {
				t.Fatalf("required %v, want %v", req, tc.required)
			}
			if podKey != tc.podAffinity {
				t.Fatalf("pod affinity key %q, want %q", podKey, tc.podAffinity)
			}
		})
	}
}

func TestRenderGangMechanisms(t *testing.T) {
	d := makeDispatch("d-9").PodSet("a", 2, 1000).MinReplicas(1).PodSet("b", 3, 0).Admitted("a", 1).Obj()
	t.Run("coscheduling", func(t *testing.T) {
		r, err := Render(mustCfg(Config{Gang: GangCoscheduling}), d, clusterView{})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.PodGroups) != 1 || len(r.Jobs) != 2 {
			t.Fatalf("podgroups %d jobs %d", len(r.PodGroups), len(r.Jobs))
		}
		pg := r.PodGroups[0]
		if mm := pg.Object["spec"].(map[string]any)["minMember"]; mm != int64(4) {
			t.Fatalf("minMember %v, want 4 (the 1 admitted of a + 3 of b)", mm)
		}
		if a := r.Jobs[0]; *a.Spec.Parallelism != 1 || *a.Spec.Completions != 1 || a.Annotations[AnnMinReplicas] != "1" || a.Annotations[AnnGPUMilli] != "1000" {
			t.Fatalf("job a: parallelism %d completions %d annotations %v, want the admitted 1", *a.Spec.Parallelism, *a.Spec.Completions, a.Annotations)
		}
		for _, j := range r.Jobs {
			if j.Spec.Template.Labels[LabelPodGroup] != pg.GetName() || j.Spec.Template.Spec.SchedulerName != "scheduler-plugins-scheduler" {
				t.Fatalf("job %s: pod group label %q scheduler %q", j.Name, j.Spec.Template.Labels[LabelPodGroup], j.Spec.Template.Spec.SchedulerName)
			}
			if j.Annotations[AnnPodSets] != "2" {
				t.Fatalf("pod-sets annotation %q", j.Annotations[AnnPodSets])
			}
		}
	})
	t.Run("kueue", func(t *testing.T) {
		r, err := Render(mustCfg(Config{Gang: GangKueue, KueueQueue: "team-a"}), d, clusterView{})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range r.Jobs {
			if j.Labels[LabelKueueQueue] != "team-a" || j.Spec.Suspend == nil || !*j.Spec.Suspend {
				t.Fatalf("job %s: queue label %q suspend %v", j.Name, j.Labels[LabelKueueQueue], j.Spec.Suspend)
			}
		}
	})
}

func TestRenderRejectsBadDispatches(t *testing.T) {
	tests := map[string]struct {
		d     *dispatchBuilder
		field string
	}{
		"no id":              {makeDispatch("").PodSet("w", 1, 0), "dispatch_id"},
		"no pod sets":        {makeDispatch("d-1"), "pod_sets"},
		"bad pod set name":   {makeDispatch("d-1").PodSet("W_1", 1, 0), "pod_sets[0].name"},
		"duplicate pod sets": {makeDispatch("d-1").PodSet("w", 1, 0).PodSet("w", 1, 0), "pod_sets[1].name"},
		"zero replicas":      {makeDispatch("d-1").PodSet("w", 0, 0), "pod_sets[0].replicas"},
		"gpu not multiple":   {makeDispatch("d-1").PodSet("w", 1, 1500), "gpu_milli"},
		"gpu too large":      {makeDispatch("d-1").PodSet("w", 1, 9000), "gpu_milli"},
		"negative memory":    {makeDispatch("d-1").PodSet("w", 1, 1000).GPUMem(-1), "gpu_memory_mib"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Render(mustCfg(Config{}), tc.d.Obj(), clusterView{})
			if !agent.IsRejected(err) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("err = %v, want a rejection naming %q", err, tc.field)
			}
		})
	}
	if _, err := Render(mustCfg(Config{}), makeDispatch("d-1").PodSet("w", 1, 0).Obj(), clusterView{}); err != nil {
		t.Fatalf("a CPU-only pod set is valid: %v", err)
	}
	var nilD = makeDispatch("d-1").Obj()
	nilD.Workload = nil
	if _, err := Render(mustCfg(Config{}), nilD, clusterView{}); !agent.IsRejected(err) {
		t.Fatalf("nil workload: %v", err)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	tests := map[string]struct {
		cfg   Config
		field string
	}{
		"bad mode":       {Config{FractionalModes: []string{"mps"}}, "fractional_modes[0]"},
		"duplicate mode": {Config{FractionalModes: []string{"mig", "mig"}}, "fractional_modes[1]"},
		"bad gang":       {Config{Gang: "volcano"}, "gang"},
		"kueue no queue": {Config{Gang: GangKueue}, "kueue_queue"},
		"bad cluster id": {Config{ClusterID: "a b"}, "cluster_id"},
		"bad namespace":  {Config{Namespace: "Not/OK"}, "namespace"},
		"bad replicas":   {Config{SharedReplicas: -2}, "shared_replicas"},
		"negative ttl":   {Config{FinishedTTL: -1}, "finished_ttl"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := tc.cfg.withDefaults()
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("err = %v, want it to name %q", err, tc.field)
			}
		})
	}
}

// The size the hub admitted is what runs: parallelism and completions of
// the Indexed Job, and a size outside min_replicas..replicas is refused.
func TestRenderElasticSize(t *testing.T) {
	for name, tc := range map[string]struct {
		admitted int32
		want     int32
		rejected string
	}{
		"no placement: all":  {want: 8},
		"admitted 3 of 2..8": {admitted: 3, want: 3},
		"below min":          {admitted: 1, rejected: "placement[w].replicas"},
	} {
		t.Run(name, func(t *testing.T) {
			b := makeDispatch("d-e").PodSet("w", 8, 1000).MinReplicas(2)
			if tc.admitted > 0 {
				b = b.Admitted("w", tc.admitted)
			}
			r, err := Render(mustCfg(Config{}), b.Obj(), clusterView{})
			if tc.rejected != "" {
				if !agent.IsRejected(err) || !strings.Contains(err.Error(), tc.rejected) {
					t.Fatalf("err = %v, want a rejection naming %s", err, tc.rejected)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			j := r.Jobs[0]
			if *j.Spec.Parallelism != tc.want || *j.Spec.Completions != tc.want {
				t.Fatalf("parallelism %d completions %d, want %d", *j.Spec.Parallelism, *j.Spec.Completions, tc.want)
			}
		})
	}
}
