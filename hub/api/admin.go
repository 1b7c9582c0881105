package api

import (
	"context"
	"fmt"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// healthTimeout bounds each component check.
const healthTimeout = 2 * time.Second

// GetLeader reads the election: the oldest candidate key is the leader,
// its create revision the term.
func (s *Service) GetLeader(ctx context.Context, _ *meridianv1.GetLeaderRequest) (*meridianv1.Leader, error) {
	if s.d.Elector == nil {
		return nil, status.Error(codes.Unavailable, "this hub runs no leader election")
	}
	resp, err := s.cli.Get(ctx, s.d.ElectionPrefix+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return nil, storeErr("read leader", err)
	}
	out := &meridianv1.Leader{}
	if len(resp.Kvs) == 0 {
		return out, nil
	}
	kv := resp.Kvs[0]
	out.HubId, out.Term = string(kv.Value), kv.CreateRevision
	if f, ok := s.d.Elector.Fence(); ok && f.Rev == kv.CreateRevision && string(kv.Key) == f.Key {
		out.IsSelf = true
		out.Address = s.d.Address
		if s.d.LeaderSince != nil {
			if t, ok := s.d.LeaderSince(); ok {
				out.Since = timestamppb.New(t)
			}
		}
	}
	return out, nil
}

// GetHealth checks etcd, the leader election and the extra components.
func (s *Service) GetHealth(ctx context.Context, _ *meridianv1.GetHealthRequest) (*meridianv1.Health, error) {
	checks := map[string]HealthCheck{"etcd": s.etcdHealth}
	if s.d.Elector != nil {
		checks["leader"] = s.leaderHealth
	}
	for name, c := range s.d.Health {
		checks[name] = c
	}
	out := &meridianv1.Health{Status: meridianv1.HealthStatus_HEALTH_STATUS_SERVING, Version: s.d.Version, HubId: s.d.HubID}
	for name, c := range checks {
		cctx, cancel := context.WithTimeout(ctx, healthTimeout)
		st, msg := c(cctx)
		cancel()
		out.Components = append(out.Components, &meridianv1.ComponentHealth{Name: name, Status: st, Message: msg})
		if worse(st, out.Status) {
			out.Status = st
		}
	}
	sort.Slice(out.Components, func(i, j int) bool { return out.Components[i].GetName() < out.Components[j].GetName() })
	return out, nil
}

func worse(a, b meridianv1.HealthStatus) bool {
	rank := func(h meridianv1.HealthStatus) int {
		switch h {
		case meridianv1.HealthStatus_HEALTH_STATUS_SERVING:
			return 0
		case meridianv1.HealthStatus_HEALTH_STATUS_DEGRADED:
			return 1
		}
		return 2
	}
	return rank(a) > rank(b)
}

func (s *Service) etcdHealth(ctx context.Context) (meridianv1.HealthStatus, string) {
	resp, err := s.cli.Get(ctx, "/meridian/health-probe", clientv3.WithCountOnly())
	if err != nil {
		return meridianv1.HealthStatus_HEALTH_STATUS_NOT_SERVING, err.Error()
	}
	return meridianv1.HealthStatus_HEALTH_STATUS_SERVING, fmt.Sprintf("revision %d", resp.Header.Revision)
}

func (s *Service) leaderHealth(ctx context.Context) (meridianv1.HealthStatus, string) {
	if _, ok := s.d.Elector.Fence(); ok {
		return meridianv1.HealthStatus_HEALTH_STATUS_SERVING, "this replica leads"
	}
	id, err := s.d.Elector.Leader(ctx)
	if err != nil {
		return meridianv1.HealthStatus_HEALTH_STATUS_DEGRADED, "no leader elected: " + err.Error()
	}
	return meridianv1.HealthStatus_HEALTH_STATUS_SERVING, "following " + id
}
