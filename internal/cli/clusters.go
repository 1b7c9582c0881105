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
	cmd.AddCommand(a.clusterCredentialCommands()...)
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

func (a *app) clusterCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Drain or resume one cluster",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErrorf("cluster: missing subcommand (drain or resume)\nUsage: meridianctl cluster drain|resume ID")
		},
	}
	var reason string
	drain := &cobra.Command{
		Use:   "drain ID",
		Short: "Close a cluster to new dispatches; running work continues",
		Args:  exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.setDraining(cmd.Context(), args[0], true, reason)
		},
	}
	drain.Flags().StringVar(&reason, "reason", "", "why, shown in the cluster's state")
	resume := &cobra.Command{
		Use:   "resume ID",
		Short: "Reopen a drained cluster to new dispatches",
		Args:  exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.setDraining(cmd.Context(), args[0], false, "")
		},
	}
	cmd.AddCommand(drain, resume)
	return cmd
}

func (a *app) setDraining(ctx context.Context, id string, draining bool, reason string) error {
	var c *meridianv1.Cluster
	err := a.call(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		client := meridianv1.NewClusterServiceClient(conn)
		var err error
		if draining {
			c, err = client.DrainCluster(ctx, &meridianv1.DrainClusterRequest{Id: id, Reason: reason})
		} else {
			c, err = client.ResumeCluster(ctx, &meridianv1.ResumeClusterRequest{Id: id})
		}
		return err
	})
	if err != nil {
		verb := "resume"
		if draining {
			verb = "drain"
		}
		return a.rpcError(ctx, err, object{kind: "cluster", id: id}.act(verb))
	}
	if a.output != "table" {
		return a.writeMessage(c)
	}
	verb := "resumed: open to new dispatches"
	if draining {
		verb = "draining: closed to new dispatches; running work continues"
	}
	fmt.Fprintf(a.env.Stdout, "cluster %s %s (state %s)\n", c.GetId(), verb, clusterStateName(c.GetState()))
	return nil
}
