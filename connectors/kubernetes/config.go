package kubernetes

import (
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// Kind is the connector kind.
const Kind = "kubernetes"

// Fractional modes, as named in Config.FractionalModes.
const (
	ModeHAMi        = "hami"         // HAMi vGPU: nvidia.com/gpu: 1 + gpumem/gpucores limits (soft isolation)
	ModeKAI         = "kai"          // KAI scheduler gpu-fraction annotation (soft isolation)
	ModeMIG         = "mig"          // MIG partitions: nvidia.com/mig-<profile> (hard isolation)
	ModeTimeSlicing = "time-slicing" // NVIDIA device plugin time-slicing: shared nvidia.com/gpu (no isolation)
)

// Gang mechanisms, as named in Config.Gang.
const (
	GangNone         = "none"         // default scheduler, no all-or-nothing guarantee
	GangCoscheduling = "coscheduling" // scheduler-plugins coscheduling PodGroup
	GangKueue        = "kueue"        // Kueue queue-name label on suspended Jobs
)

// Default label keys.
const (
	DefaultRackLabel = "topology.kubernetes.io/rack"
	ZoneLabel        = "topology.kubernetes.io/zone"
	HostnameLabel    = "kubernetes.io/hostname"
)

// Config configures a Connector. Zero values take the defaults noted.
type Config struct {
	// REST is the client configuration. When nil, Kubeconfig is loaded, or
	// the in-cluster configuration when Kubeconfig is empty too.
	REST *rest.Config
	// Kubeconfig is a kubeconfig file path.
	Kubeconfig string
	// Namespace the Jobs are created in (default "default"). Only Jobs in
	// this namespace that carry the connector's labels are ever touched.
	Namespace string
	// ClusterID is written on every object so that two agents sharing one
	// cluster never touch each other's Jobs. Letters, digits, '-', '_', '.'.
	ClusterID string
	// Labels are the cluster's labels in the inventory.
	Labels map[string]string
	// RackLabel is the node label that names a node's rack (default
	// topology.kubernetes.io/rack).
	RackLabel string
	// NodeSelector restricts the advertised nodes (all GPU nodes if empty).
	NodeSelector map[string]string
	// FractionalModes the cluster's device plugins support, in order of
	// preference: hami, kai, mig, time-slicing.
	FractionalModes []string
	// SharedReplicas is how many nvidia.com/gpu units one physical GPU is
	// advertised as by time-slicing (its replicas) or HAMi (its
	// deviceSplitCount). Default 1: nvidia.com/gpu counts whole GPUs.
	SharedReplicas int
	// KAISchedulerName is the schedulerName of fractional pods in kai mode
	// (default "kai-scheduler"); KAIQueue, when set, is the pods'
	// kai.scheduler/queue label.
	KAISchedulerName string
	KAIQueue         string
	// Gang is the gang mechanism: none (default), coscheduling or kueue.
	Gang string
	// CoschedulingSchedulerName is the schedulerName of pods in a
	// coscheduling PodGroup (default "scheduler-plugins-scheduler").
	CoschedulingSchedulerName string
	// KueueQueue is the LocalQueue named by the queue-name label (required
	// with Gang kueue).
	KueueQueue string
	// SchedulerName of ordinary pods (default: the cluster's default).
	SchedulerName string
	// Tolerations added to every pod, e.g. for tainted GPU nodes. Taints
	// they tolerate do not make a node unschedulable in the inventory.
	Tolerations []corev1.Toleration
	// Classes maps a GFD product label value to an accelerator class;
	// other products get ClassFromProduct.
	Classes map[string]string
	// DefaultImage runs when a workload has no container template
	// (default "busybox:1.37").
	DefaultImage string
	// FinishedTTL is the Jobs' ttlSecondsAfterFinished (default 1h). List
	// forgets a dispatch after its Jobs are gone.
	FinishedTTL time.Duration
	// RetainFinished is how long a cancelled dispatch stays in List after
	// its Jobs are deleted (default 1h).
	RetainFinished time.Duration
	// SyncTimeout bounds the first informer sync in New (default 30s).
	SyncTimeout time.Duration
	// Logger (default: discard).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)

// Validate checks cfg as New would, without connecting. Errors name the
// field.
func (cfg Config) Validate() error {
	_, err := cfg.withDefaults()
	return err
}

// modeOf maps configured mode names to the hub's fractional modes.
var modeOf = map[string]meridianv1.FractionalMode{
	ModeHAMi:        meridianv1.FractionalMode_FRACTIONAL_MODE_MEMORY,
	ModeKAI:         meridianv1.FractionalMode_FRACTIONAL_MODE_MEMORY,
	ModeMIG:         meridianv1.FractionalMode_FRACTIONAL_MODE_MIG,
	ModeTimeSlicing: meridianv1.FractionalMode_FRACTIONAL_MODE_TIME_SLICE,
}

// withDefaults checks cfg and fills in the defaults. Errors name the field.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	if !idPattern.MatchString(cfg.Namespace) {
		return cfg, fmt.Errorf("kubernetes: namespace %q: not a valid namespace name", cfg.Namespace)
	}
	if cfg.ClusterID != "" && !idPattern.MatchString(cfg.ClusterID) {
		return cfg, fmt.Errorf("kubernetes: cluster_id %q: must be at most 63 letters, digits, '-', '_' or '.'", cfg.ClusterID)
	}
	if cfg.RackLabel == "" {
		cfg.RackLabel = DefaultRackLabel
	}
	seen := map[string]bool{}
	for i, m := range cfg.FractionalModes {
		if _, ok := modeOf[m]; !ok {
			return cfg, fmt.Errorf("kubernetes: fractional_modes[%d] %q: want hami, kai, mig or time-slicing", i, m)
		}
		if seen[m] {
			return cfg, fmt.Errorf("kubernetes: fractional_modes[%d] %q: listed twice", i, m)
		}
		seen[m] = true
	}
	if cfg.SharedReplicas == 0 {
		cfg.SharedReplicas = 1
	}
	if cfg.SharedReplicas < 0 || cfg.SharedReplicas > 1000 {
		return cfg, fmt.Errorf("kubernetes: shared_replicas %d: want 1..1000", cfg.SharedReplicas)
	}
	if cfg.KAISchedulerName == "" {
		cfg.KAISchedulerName = "kai-scheduler"
	}
	switch cfg.Gang {
	case "":
		cfg.Gang = GangNone
	case GangNone, GangCoscheduling:
	case GangKueue:
		if cfg.KueueQueue == "" {
			return cfg, fmt.Errorf("kubernetes: kueue_queue: required with gang %q", GangKueue)
		}
	default:
		return cfg, fmt.Errorf("kubernetes: gang %q: want none, coscheduling or kueue", cfg.Gang)
	}
	if cfg.CoschedulingSchedulerName == "" {
		cfg.CoschedulingSchedulerName = "scheduler-plugins-scheduler"
	}
	if cfg.DefaultImage == "" {
		cfg.DefaultImage = "busybox:1.37"
	}
	if cfg.FinishedTTL == 0 {
		cfg.FinishedTTL = time.Hour
	}
	if cfg.FinishedTTL < 0 {
		return cfg, fmt.Errorf("kubernetes: finished_ttl %s: must not be negative", cfg.FinishedTTL)
	}
	if cfg.RetainFinished <= 0 {
		cfg.RetainFinished = time.Hour
	}
	if cfg.SyncTimeout <= 0 {
		cfg.SyncTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Labels = maps.Clone(cfg.Labels)
	cfg.FractionalModes = slices.Clone(cfg.FractionalModes)
	return cfg, nil
}

// hubModes returns the fractional modes advertised to the hub.
func (cfg Config) hubModes() []meridianv1.FractionalMode {
	var out []meridianv1.FractionalMode
	for _, m := range cfg.FractionalModes {
		if hm := modeOf[m]; !slices.Contains(out, hm) {
			out = append(out, hm)
		}
	}
	return out
}

// has reports whether mode m is configured.
func (cfg Config) has(m string) bool { return slices.Contains(cfg.FractionalModes, m) }
