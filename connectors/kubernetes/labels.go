package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Resource names and GPU Feature Discovery labels the connector reads.
const (
	ResourceGPU      = "nvidia.com/gpu"
	ResourceGPUMem   = "nvidia.com/gpumem"   // HAMi: MiB of one vGPU
	ResourceGPUCores = "nvidia.com/gpucores" // HAMi: percent of one GPU's cores
	MIGPrefix        = "nvidia.com/mig-"

	LabelGPUProduct = "nvidia.com/gpu.product"
	LabelGPUMemory  = "nvidia.com/gpu.memory" // MiB per GPU
	LabelGPUCount   = "nvidia.com/gpu.count"
	LabelGPUClique  = "nvidia.com/gpu.clique" // NVLink domain (clique id)

	// KAI scheduler annotations and label.
	AnnotationGPUFraction = "gpu-fraction"
	AnnotationGPUMemory   = "gpu-memory"
	LabelKAIQueue         = "kai.scheduler/queue"
)

// Labels and annotations the connector writes on its Jobs and pods. Objects
// without LabelManagedBy=ManagedByValue are never touched.
const (
	LabelManagedBy  = "app.kubernetes.io/managed-by"
	ManagedByValue  = "meridian-agent"
	LabelDispatch   = "meridian.io/dispatch"    // dispatch id (or its hash when not a valid label value)
	LabelWorkload   = "meridian.io/workload"    // workload id (or its hash)
	LabelCluster    = "meridian.io/cluster-id"  // Config.ClusterID
	LabelPodSet     = "meridian.io/pod-set"     // pod set name
	AnnDispatchID   = "meridian.io/dispatch-id" // the exact dispatch id
	AnnWorkloadID   = "meridian.io/workload-id" // the exact workload id
	AnnPodSets      = "meridian.io/pod-sets"    // number of Jobs of the dispatch
	AnnGPUMilli     = "meridian.io/gpu-milli"   // GPU milli of all replicas of this Job
	AnnMinReplicas  = "meridian.io/min-replicas"
	AnnFractionMode = "meridian.io/fractional-mode"
	// LabelConnector is set on the cluster's inventory labels.
	LabelConnector = "meridian.io/connector"

	// Gang mechanisms.
	LabelPodGroup   = "scheduling.x-k8s.io/pod-group" // scheduler-plugins coscheduling
	LabelKueueQueue = "kueue.x-k8s.io/queue-name"
)

// ClassFromProduct turns a GFD product label such as NVIDIA-H100-80GB-HBM3
// into an accelerator class such as nvidia-h100-80gb: lower case, form
// factor and memory-technology tokens (SXM4, PCIe, HBM3, NVL) and any MIG
// suffix dropped, and the memory size appended from memMiB when the product
// names none. An empty product gives "".
func ClassFromProduct(product string, memMiB int64) string {
	p := strings.ToLower(strings.TrimSpace(product))
	if p == "" {
		return ""
	}
	p = strings.NewReplacer(" ", "-", "_", "-").Replace(p)
	var keep []string
	hasMem := false
	for _, t := range strings.Split(p, "-") {
		switch {
		case t == "":
			continue
		case t == "mig" || strings.HasPrefix(t, "mig."):
			goto done
		case dropToken.MatchString(t):
			continue
		case memToken.MatchString(t):
			hasMem = true
		}
		keep = append(keep, t)
	}
done:
	if len(keep) == 0 {
		return ""
	}
	if keep[0] != "nvidia" {
		keep = append([]string{"nvidia"}, keep...)
	}
	if !hasMem && memMiB > 0 {
		keep = append(keep, strconv.FormatInt((memMiB+512)/1024, 10)+"gb")
	}
	return strings.Join(keep, "-")
}

var (
	dropToken = regexp.MustCompile(`^(sxm\d*|pcie|hbm\d*e?|nvl\d*|tesla|geforce)$`)
	memToken  = regexp.MustCompile(`^\d+gb$`)
	migName   = regexp.MustCompile(`^(\d+)g\.(\d+)gb$`)
)

// MIGProfile is a MIG partition profile such as 1g.10gb.
type MIGProfile struct {
	Name   string // "1g.10gb"
	Slices int    // compute slices out of 7
	MemGB  int    // memory in GB
}

// ParseMIGProfile parses a profile name ("1g.10gb") or a resource name
// ("nvidia.com/mig-1g.10gb").
func ParseMIGProfile(s string) (MIGProfile, error) {
	name := strings.TrimPrefix(s, MIGPrefix)
	m := migName.FindStringSubmatch(name)
	if m == nil {
		return MIGProfile{}, fmt.Errorf("mig profile %q: want <slices>g.<memory>gb, e.g. 1g.10gb", s)
	}
	g, _ := strconv.Atoi(m[1])
	mem, _ := strconv.Atoi(m[2])
	if g < 1 || g > 8 || mem < 1 {
		return MIGProfile{}, fmt.Errorf("mig profile %q: slices must be 1..8 and memory positive", s)
	}
	return MIGProfile{Name: name, Slices: g, MemGB: mem}, nil
}

// Resource is the profile's extended resource name.
func (p MIGProfile) Resource() string { return MIGPrefix + p.Name }

// Milli is the profile's share of one GPU in thousandths (slices of 7).
func (p MIGProfile) Milli() int32 { return int32(min(1000, p.Slices*1000/7)) }

// labelSafe returns s when it is a valid label value, else "h-" and a
// hash of s, so that any id can be selected on.
func labelSafe(s string) string {
	if len(s) <= 63 && (s == "" || idPattern.MatchString(s)) {
		return s
	}
	return "h-" + shortHash(s, 20)
}

func shortHash(s string, n int) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])[:n]
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// JobName is the deterministic name of a dispatch's Job for one pod set:
// "mrd-<dispatch>-<pod set>" when that is a short DNS-1123 label, else
// "mrd-" and a hash of both. It stays at most 52 characters so that pod
// names and the job-name label fit.
func JobName(dispatchID, podSet string) string {
	n := "mrd-" + strings.ToLower(dispatchID) + "-" + podSet
	if len(n) <= 52 && dnsLabel.MatchString(n) && strings.ToLower(dispatchID) == dispatchID {
		return n
	}
	return "mrd-" + shortHash(dispatchID+"/"+podSet, 24)
}
