package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

func (a *app) clustersCommand() *cobra.Command {
	var state string
	var labels []string
	cmd := &cobra.Command{
		Use:   "clusters",
		Short: "Show the fleet: capacity and free GPUs by class, freshness, fractional modes, state",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &meridianv1.ListClustersRequest{LabelSelector: strings.Join(labels, ",")}
			if state != "" {
				name := strings.ToUpper(state)
				if !strings.HasPrefix(name, "CLUSTER_STATE_") {
					name = "CLUSTER_STATE_" + name
				}
				n, ok := meridianv1.ClusterState_value[name]
				if !ok || n == 0 {
					return usageErrorf("--state: unknown state %q (use ready, lost or draining)", state)
				}
				req.State = meridianv1.ClusterState(n)
			}
			var resp *meridianv1.ListClustersResponse
			err := a.call(cmd.Context(), func(ctx context.Context, conn *grpc.ClientConn) error {
				var err error
				resp, err = meridianv1.NewClusterServiceClient(conn).ListClusters(ctx, req)
				return err
			})
			if err != nil {
				return a.rpcError(cmd.Context(), err, object{kind: "cluster list"})
			}
			if a.output != "table" {
				return a.writeMessage(resp)
			}
			if len(resp.GetClusters()) == 0 {
				fmt.Fprintln(a.env.Stderr, "no clusters; start a meridian-agent in each cluster to register it")
				return nil
			}
			return a.printClusters(resp.GetClusters())
		},
	}
	cmd.Flags().StringVar(&state, "state", "", "only clusters in this state: ready, lost or draining")
	cmd.Flags().StringArrayVarP(&labels, "selector", "l", nil, "label selector key=value or key!=value (repeatable)")
	return cmd
}

// printClusters prints one row per cluster and accelerator class.
func (a *app) printClusters(clusters []*meridianv1.Cluster) error {
	now := a.env.Now()
	sorted := append([]*meridianv1.Cluster(nil), clusters...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].GetId() < sorted[j].GetId() })
	t := newTable(a.env.Stdout, "CLUSTER", "STATE", "CONNECTOR", "CLASS", "NODES", "GPUS", "FREE", "FREE WHOLE", "FRACTIONAL", "RUNNING", "HEARTBEAT")
	for _, c := range sorted {
		modes := make([]string, 0, len(c.GetFractionalModes()))
		for _, m := range c.GetFractionalModes() {
			modes = append(modes, modeName(m))
		}
		fractional := "-"
		if len(modes) > 0 {
			fractional = strings.Join(modes, ",")
		}
		heartbeat := "never"
		if c.GetLastHeartbeat() != nil {
			heartbeat = age(now, c.GetLastHeartbeat()) + " ago"
		}
		st := clusterStateName(c.GetState())
		if c.GetDrainReason() != "" {
			st += " (" + c.GetDrainReason() + ")"
		}
		running := fmt.Sprint(c.GetRunningDispatches())
		caps := c.GetCapacity()
		if len(caps) == 0 {
			t.row(c.GetId(), st, connectorName(c.GetConnector()), "-", "0", "0", "0", "0", fractional, running, heartbeat)
			continue
		}
		for i, k := range caps {
			row := []string{"", "", "", k.GetAcceleratorClass(), fmt.Sprint(k.GetNodes()), gpus(k.GetTotalMilli()), gpus(k.GetFreeMilli()), fmt.Sprint(k.GetFreeWholeGpus()), "", "", ""}
			if i == 0 {
				row[0], row[1], row[2] = c.GetId(), st, connectorName(c.GetConnector())
				row[8], row[9], row[10] = fractional, running, heartbeat
			}
			t.row(row...)
		}
	}
	return t.flush()
}
