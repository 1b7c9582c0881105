package api

import (
	"context"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-gpu/meridian/hub/api/validation"
	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

const maxClusterIDLen = 63

func checkClusterID(id string) error {
	switch {
	case id == "":
		return invalid("id", "is required")
	case len(id) > maxClusterIDLen:
		return invalid("id", "is %d characters; a cluster id is a DNS-1123 label of at most %d", len(id), maxClusterIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return invalid("id", "%q is not a DNS-1123 label: use lower-case letters, digits and '-'", id)
		}
	}
	return nil
}

// ListClusters lists the fleet from the ClusterSource.
func (s *Service) ListClusters(ctx context.Context, req *meridianv1.ListClustersRequest) (*meridianv1.ListClustersResponse, error) {
	if _, ok := meridianv1.ClusterState_name[int32(req.GetState())]; !ok {
		return nil, invalid("state", "unknown cluster state %d", req.GetState())
	}
	sel, err := parseSelector(req.GetLabelSelector())
	if err != nil {
		return nil, invalid("label_selector", "%v", err)
	}
	out := &meridianv1.ListClustersResponse{}
	if s.d.Clusters == nil {
		return out, nil
	}
	for _, c := range s.d.Clusters.ListClusters() {
		if st := req.GetState(); st != meridianv1.ClusterState_CLUSTER_STATE_UNSPECIFIED && c.GetState() != st {
			continue
		}
		if !sel.matches(c.GetLabels()) {
			continue
		}
		out.Clusters = append(out.Clusters, proto.Clone(c).(*meridianv1.Cluster))
	}
	return out, nil
}

// GetCluster returns one cluster.
func (s *Service) GetCluster(ctx context.Context, req *meridianv1.GetClusterRequest) (*meridianv1.Cluster, error) {
	if err := checkClusterID(req.GetId()); err != nil {
		return nil, err
	}
	return s.cluster(req.GetId())
}

func (s *Service) cluster(id string) (*meridianv1.Cluster, error) {
	if s.d.Clusters != nil {
		if c, ok := s.d.Clusters.GetCluster(id); ok {
			return proto.Clone(c).(*meridianv1.Cluster), nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "cluster %s not found; it has never registered with this hub", id)
}

// DrainCluster closes a cluster to new dispatches.
func (s *Service) DrainCluster(ctx context.Context, req *meridianv1.DrainClusterRequest) (*meridianv1.Cluster, error) {
	if err := checkClusterID(req.GetId()); err != nil {
		return nil, err
	}
	if len(req.GetReason()) > maxReasonLen {
		return nil, invalid("reason", "is %d bytes; at most %d", len(req.GetReason()), maxReasonLen)
	}
	return s.setDraining(ctx, req.GetId(), true, req.GetReason())
}

// ResumeCluster reopens a drained cluster.
func (s *Service) ResumeCluster(ctx context.Context, req *meridianv1.ResumeClusterRequest) (*meridianv1.Cluster, error) {
	if err := checkClusterID(req.GetId()); err != nil {
		return nil, err
	}
	return s.setDraining(ctx, req.GetId(), false, "")
}

// DrainReasonSetter is an optional ability of a ClusterSource: recording
// the operator's reason with the drain flag. Without it the reason is
// dropped.
type DrainReasonSetter interface {
	SetDrainingReason(ctx context.Context, id string, draining bool, reason string) error
}

func (s *Service) setDraining(ctx context.Context, id string, draining bool, reason string) (*meridianv1.Cluster, error) {
	if _, err := s.cluster(id); err != nil {
		return nil, err
	}
	var err error
	if rs, ok := s.d.Clusters.(DrainReasonSetter); ok {
		err = rs.SetDrainingReason(ctx, id, draining, reason)
	} else {
		err = s.d.Clusters.SetDraining(ctx, id, draining)
	}
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return nil, err
		}
		return nil, storeErr("set draining", err)
	}
	return s.cluster(id)
}

// ListAcceleratorClasses reports the classes the hub knows: from the
// fleet's advertisements, the queues' quotas and the configured class
// weights.
func (s *Service) ListAcceleratorClasses(ctx context.Context, _ *meridianv1.ListAcceleratorClassesRequest) (*meridianv1.ListAcceleratorClassesResponse, error) {
	by := map[string]*meridianv1.AcceleratorClass{}
	class := func(name string) *meridianv1.AcceleratorClass {
		c := by[name]
		if c == nil {
			c = &meridianv1.AcceleratorClass{Name: name}
			by[name] = c
		}
		return c
	}
	if s.d.Clusters != nil {
		for _, cl := range s.d.Clusters.ListClusters() {
			for _, cap := range cl.GetCapacity() {
				c := class(cap.GetAcceleratorClass())
				c.TotalMilli += cap.GetTotalMilli()
				c.FreeMilli += cap.GetFreeMilli()
				c.Nodes += cap.GetNodes()
				if !slices.Contains(c.Clusters, cl.GetId()) {
					c.Clusters = append(c.Clusters, cl.GetId())
				}
			}
		}
	}
	items, _, err := s.st.List(ctx, store.Prefix(store.KindQueues), 0)
	if err != nil {
		return nil, storeErr("list queues", err)
	}
	for _, it := range items {
		q, err := DecodeQueueRecord(it.Value)
		if err != nil {
			continue
		}
		for _, qq := range q.GetQuotas() {
			if n := qq.GetAcceleratorClass(); n != "" && n != validation.AnyClass {
				class(n).InQuotas = true
			}
		}
	}
	for n, w := range s.d.ClassWeights {
		class(n).ClassWeight = proto.Float64(w)
	}
	out := &meridianv1.ListAcceleratorClassesResponse{}
	for _, c := range by {
		slices.Sort(c.Clusters)
		out.Classes = append(out.Classes, c)
	}
	slices.SortFunc(out.Classes, func(a, b *meridianv1.AcceleratorClass) int { return cmpString(a.GetName(), b.GetName()) })
	return out, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
