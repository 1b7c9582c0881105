package e2eutil

import (
	"context"
	"fmt"
	"time"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// WaitClusters waits until the hub reports every id READY with capacity.
func WaitClusters(ctx context.Context, cl meridianv1.ClusterServiceClient, limit time.Duration, ids ...string) error {
	deadline := time.Now().Add(limit)
	for {
		resp, err := cl.ListClusters(ctx, &meridianv1.ListClustersRequest{})
		ready := map[string]bool{}
		if err == nil {
			for _, c := range resp.GetClusters() {
				if c.GetState() == meridianv1.ClusterState_CLUSTER_STATE_READY && len(c.GetCapacity()) > 0 {
					ready[c.GetId()] = true
				}
			}
		}
		all := true
		for _, id := range ids {
			all = all && ready[id]
		}
		if all {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("clusters %v not all READY within %s (ready %v, err %v)", ids, limit, ready, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
