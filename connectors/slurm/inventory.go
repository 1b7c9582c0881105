package slurm

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// Node label keys the connector sets.
const (
	LabelState     = "slurm.meridian.io/state"
	LabelSwitch    = "slurm.meridian.io/switch"
	LabelGresType  = "slurm.meridian.io/gres-type"
	LabelShards    = "slurm.meridian.io/shards"
	LabelMPS       = "slurm.meridian.io/mps"
	LabelReason    = "slurm.meridian.io/reason"
	FeaturePrefix  = "feature.slurm.meridian.io/"
	PartitionLabel = "partition.slurm.meridian.io/"
	// LabelConnector is set on the cluster's labels.
	LabelConnector = "meridian.io/connector"
)

// knownClasses maps a GRES type to an accelerator class and its memory.
// Config.Classes and Config.GPUMemoryMiB override it.
var knownClasses = map[string]struct {
	class string
	mib   int64
}{
	"h100": {"nvidia-h100-80gb", 81920},
	"h200": {"nvidia-h200-141gb", 144384},
	"a100": {"nvidia-a100-80gb", 81920},
	"l40s": {"nvidia-l40s-48gb", 49152},
}

// clusterShape is what an inventory teaches Launch about the cluster.
type clusterShape struct {
	gpusPerNode  int
	mpsPerGPU    int64
	shardsPerGPU int64
	hasMPS       bool
	hasShard     bool
	gresTypeOf   map[string]string // class -> gres type
}

type invOptions struct {
	partition string
	classOf   func(gresType string) (class string, mib int64)
	labels    map[string]string
}

var labelName = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)

// labelValue makes s a valid label value (at most 63 of [A-Za-z0-9-_.],
// starting and ending alphanumeric), or "" if nothing is left.
func labelValue(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '_'
		}
	}
	out := strings.Trim(string(b), "-_.")
	if len(out) > 63 {
		out = strings.TrimRight(out[:63], "-_.")
	}
	return out
}

// buildInventory maps Slurm nodes, jobs and the switch topology onto the
// agent's inventory. Whole-GPU use comes from each node's gres_used gpu
// IDX ranges; MPS and shard use from the gres_detail of running jobs,
// because 22.05 misreports shard and mps counts in gres_used.
func buildInventory(nodes []NodeInfo, jobs []JobInfo, leaf map[string]string, o invOptions) (*agent.Inventory, clusterShape, error) {
	sh := clusterShape{gresTypeOf: map[string]string{}}
	inv := &agent.Inventory{Labels: maps.Clone(o.labels)}
	if inv.Labels == nil {
		inv.Labels = map[string]string{}
	}
	inv.Labels[LabelConnector] = Kind

	type perNode struct {
		gpus               int
		mpsPer, shardPer   int64
		fracMilli          map[int]int64
		fracIdxFromNode    map[int]bool
		usedIdx            map[int]bool
		class, gtype       string
		mib                int64
		mpsTotal, shardTot int64
	}
	info := map[string]*perNode{}
	for _, n := range nodes {
		if o.partition != "" && !slices.Contains(n.Partitions, o.partition) {
			continue
		}
		cfg, err := ParseGres(n.Gres)
		if err != nil {
			return nil, sh, fmt.Errorf("node %s: gres: %w", n.Name, err)
		}
		used, err := ParseGres(n.GresUsed)
		if err != nil {
			return nil, sh, fmt.Errorf("node %s: gres_used: %w", n.Name, err)
		}
		pn := &perNode{fracMilli: map[int]int64{}, fracIdxFromNode: map[int]bool{}, usedIdx: map[int]bool{}}
		for _, g := range cfg {
			switch g.Name {
			case "gpu":
				pn.gpus += int(g.Count)
				if pn.gtype == "" {
					pn.gtype = g.Type
				}
			case "mps":
				pn.mpsTotal += g.Count
			case "shard":
				pn.shardTot += g.Count
			}
		}
		if pn.gpus > maxIndex {
			return nil, sh, fmt.Errorf("node %s: gres: %d GPUs is more than %d", n.Name, pn.gpus, maxIndex)
		}
		if pn.gpus > 0 {
			pn.mpsPer = pn.mpsTotal / int64(pn.gpus)
			pn.shardPer = pn.shardTot / int64(pn.gpus)
		}
		for _, g := range used {
			for _, i := range g.IDX {
				switch g.Name {
				case "gpu":
					pn.usedIdx[i] = true
				case "mps", "shard":
					pn.fracIdxFromNode[i] = true
				}
			}
		}
		pn.class, pn.mib = o.classOf(pn.gtype)
		info[n.Name] = pn
	}
	// Fractional use from running jobs' gres_detail (one entry per node).
	for _, j := range jobs {
		switch MapJobState(j.State, 0, "", false).State {
		case agent.StateRunning:
		default:
			continue
		}
		names, err := ExpandHostlist(j.Nodes)
		if err != nil {
			continue // a job we cannot read does not break the inventory
		}
		for i, detail := range j.GresDetail {
			if i >= len(names) {
				break
			}
			pn := info[names[i]]
			if pn == nil {
				continue
			}
			gs, err := ParseGres(detail)
			if err != nil {
				continue
			}
			for _, g := range gs {
				var per int64
				switch g.Name {
				case "mps":
					per = pn.mpsPer
				case "shard":
					per = pn.shardPer
				default:
					continue
				}
				if per <= 0 || len(g.IDX) == 0 {
					continue
				}
				share := g.Count * 1000 / per / int64(len(g.IDX))
				for _, idx := range g.IDX {
					pn.fracMilli[idx] += share
				}
			}
		}
	}

	for _, n := range nodes {
		pn := info[n.Name]
		if pn == nil {
			continue
		}
		healthy := NodeHealthy(n.State, n.Flags)
		an := &agentv1.Node{
			Name:             n.Name,
			Labels:           map[string]string{},
			AcceleratorClass: pn.class,
			Schedulable:      NodeSchedulable(n.State, n.Flags),
			CpuMilliTotal:    n.CPUs * 1000,
			CpuMilliFree:     max(0, n.CPUs-n.AllocCPUs) * 1000,
			MemoryMibTotal:   n.MemoryMiB,
			MemoryMibFree:    max(0, n.MemoryMiB-n.AllocMiB),
		}
		if pn.gpus == 0 {
			an.AcceleratorClass = ""
		}
		if !healthy {
			an.CpuMilliFree, an.MemoryMibFree = 0, 0
		}
		if sw := leaf[n.Name]; sw != "" {
			an.Rack = sw
			an.Labels[LabelSwitch] = labelValue(sw)
			// The leaf switch is the NVLink domain of nodes that say they
			// have NVLink (see docs/design/slurm-connector.md).
			if slices.Contains(n.Features, "nvlink") {
				an.NvlinkDomain = sw
			}
		}
		state := n.State
		if len(n.Flags) > 0 {
			state += "+" + strings.ToLower(strings.Join(n.Flags, "+"))
		}
		if v := labelValue(state); v != "" {
			an.Labels[LabelState] = v
		}
		if v := labelValue(n.Reason); v != "" && !an.Schedulable {
			an.Labels[LabelReason] = v
		}
		for _, f := range n.Features {
			if labelName.MatchString(f) {
				an.Labels[FeaturePrefix+f] = "true"
			}
		}
		for _, p := range n.Partitions {
			if labelName.MatchString(p) {
				an.Labels[PartitionLabel+p] = "true"
			}
		}
		if pn.gtype != "" {
			if v := labelValue(pn.gtype); v != "" {
				an.Labels[LabelGresType] = v
			}
		}
		if pn.shardTot > 0 {
			an.Labels[LabelShards] = strconv.FormatInt(pn.shardTot, 10)
			sh.hasShard = true
		}
		if pn.mpsTotal > 0 {
			an.Labels[LabelMPS] = strconv.FormatInt(pn.mpsTotal, 10)
			sh.hasMPS = true
		}
		for i := 0; i < pn.gpus; i++ {
			free := int64(1000)
			switch {
			case !healthy || pn.usedIdx[i]:
				free = 0
			case pn.fracMilli[i] > 0:
				free = max(0, 1000-pn.fracMilli[i])
			case pn.fracIdxFromNode[i]:
				// Slurm says a fraction is in use but no running job told
				// us how much: assume all of it.
				free = 0
			}
			an.Gpus = append(an.Gpus, &agentv1.Gpu{
				Index: int32(i), FreeMilli: int32(free), Healthy: healthy,
				TotalMemoryMib: pn.mib, FreeMemoryMib: pn.mib * free / 1000,
			})
		}
		if pn.gpus > sh.gpusPerNode {
			sh.gpusPerNode = pn.gpus
		}
		if pn.mpsPer > sh.mpsPerGPU {
			sh.mpsPerGPU = pn.mpsPer
		}
		if pn.shardPer > sh.shardsPerGPU {
			sh.shardsPerGPU = pn.shardPer
		}
		if pn.class != "" && pn.gtype != "" {
			sh.gresTypeOf[pn.class] = pn.gtype
		}
		inv.Nodes = append(inv.Nodes, an)
	}
	sort.Slice(inv.Nodes, func(i, j int) bool { return inv.Nodes[i].Name < inv.Nodes[j].Name })
	if sh.hasMPS {
		inv.FractionalModes = append(inv.FractionalModes, meridianv1.FractionalMode_FRACTIONAL_MODE_MPS)
	}
	if sh.hasShard {
		inv.FractionalModes = append(inv.FractionalModes, meridianv1.FractionalMode_FRACTIONAL_MODE_SHARD)
	}
	return inv, sh, nil
}
