package api

import (
	"context"
	"sort"

	"github.com/meridian-gpu/meridian/hub/fleet"
	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// FleetSource is an optional ability of a ClusterSource: the registry of
// the clusters' last advertisements, node by node. The scheduling loop
// (hub/dispatch) has it. Without it GetClusterTopology answers with no
// nodes.
type FleetSource interface {
	Fleet() *fleet.Registry
}

// GetClusterTopology returns one cluster's nodes and topology domains
// (NVLink domains and racks) with their total and free GPU capacity, for
// the ops dashboard.
func (s *Service) GetClusterTopology(ctx context.Context, req *meridianv1.GetClusterTopologyRequest) (*meridianv1.ClusterTopology, error) {
	if err := checkClusterID(req.GetId()); err != nil {
		return nil, err
	}
	if _, err := s.cluster(req.GetId()); err != nil {
		return nil, err
	}
	out := &meridianv1.ClusterTopology{ClusterId: req.GetId()}
	fs, ok := s.d.Clusters.(FleetSource)
	if !ok || fs.Fleet() == nil {
		return out, nil
	}
	for _, v := range fs.Fleet().Views() {
		if v.Cluster.ID != req.GetId() {
			continue
		}
		out.Nodes = make([]*meridianv1.NodeCapacity, 0, len(v.Cluster.Nodes))
		for i := range v.Cluster.Nodes {
			n := &v.Cluster.Nodes[i]
			out.Nodes = append(out.Nodes, nodeCapacity(n.Name, n.Rack, n.NVLink, &n.Res))
		}
	}
	sort.Slice(out.Nodes, func(a, b int) bool {
		x, y := out.Nodes[a], out.Nodes[b]
		if x.Rack != y.Rack {
			return x.Rack < y.Rack
		}
		if x.NvlinkDomain != y.NvlinkDomain {
			return x.NvlinkDomain < y.NvlinkDomain
		}
		return x.Name < y.Name
	})
	out.Domains = append(domainsOf("nvlink", out.Nodes, func(n *meridianv1.NodeCapacity) string { return n.NvlinkDomain }),
		domainsOf("rack", out.Nodes, func(n *meridianv1.NodeCapacity) string { return n.Rack })...)
	return out, nil
}

func nodeCapacity(name, rack, nvlink string, res *gpufit.Node) *meridianv1.NodeCapacity {
	nc := &meridianv1.NodeCapacity{Name: name, Rack: rack, NvlinkDomain: nvlink, Gpus: int32(len(res.GPUs))}
	if len(res.GPUs) > 0 {
		nc.AcceleratorClass = res.Class
	}
	for _, g := range res.GPUs {
		nc.TotalMilli += gpufit.MilliPerGPU
		nc.FreeMilli += int64(g.FreeMilli)
		if g.FreeMilli >= gpufit.MilliPerGPU {
			nc.FreeWholeGpus++
		}
	}
	return nc
}

// domainsOf sums the nodes by the domain name key gives, skipping nodes
// with none; sorted by name.
func domainsOf(kind string, nodes []*meridianv1.NodeCapacity, key func(*meridianv1.NodeCapacity) string) []*meridianv1.TopologyDomain {
	byName := map[string]*meridianv1.TopologyDomain{}
	classes := map[string]map[string]bool{}
	for _, n := range nodes {
		k := key(n)
		if k == "" {
			continue
		}
		d := byName[k]
		if d == nil {
			d = &meridianv1.TopologyDomain{Kind: kind, Name: k}
			byName[k] = d
			classes[k] = map[string]bool{}
		}
		d.Nodes++
		d.Gpus += n.Gpus
		d.TotalMilli += n.TotalMilli
		d.FreeMilli += n.FreeMilli
		d.FreeWholeGpus += n.FreeWholeGpus
		if n.AcceleratorClass != "" && !classes[k][n.AcceleratorClass] {
			classes[k][n.AcceleratorClass] = true
			d.AcceleratorClasses = append(d.AcceleratorClasses, n.AcceleratorClass)
		}
	}
	out := make([]*meridianv1.TopologyDomain, 0, len(byName))
	for _, d := range byName {
		sort.Strings(d.AcceleratorClasses)
		out = append(out, d)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}
