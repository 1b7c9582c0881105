package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meridian-gpu/meridian/internal/soak/topology"
)

// upOptions are meridian-soak up's flags.
type upOptions struct {
	dir                 string
	hubs, agents        int
	hubBin, agentBin    string
	timeScale           float64
	leaderTTL, schedule time.Duration
}

func upCommand(stdout, stderr io.Writer) *cobra.Command {
	var o upOptions
	cmd := &cobra.Command{
		Use:   "up --dir D [--hubs 3] [--agents 4]",
		Short: "Start etcd and NATS clusters, the hubs and the agents as processes on loopback, and keep them up until Ctrl-C",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return up(cmd.Context(), o, stdout, stderr)
		},
	}
	o.flags(cmd, "64 H100s", 0)
	cmd.Flags().Float64Var(&o.timeScale, "time-scale", 1, "simulated seconds per real second in the simulated clusters")
	return cmd
}

// flags registers the topology's flags, which up and run share: a
// cluster's size and the default lease differ between them.
func (o *upOptions) flags(cmd *cobra.Command, clusterSize string, leaderTTL time.Duration) {
	f := cmd.Flags()
	f.StringVar(&o.dir, "dir", "", "directory for every part's data, logs (D/logs/<name>.log), launch journals and binaries (required)")
	f.IntVar(&o.hubs, "hubs", 3, "hub replicas")
	f.IntVar(&o.agents, "agents", 4, "agents, each with a simulated cluster of "+clusterSize)
	f.StringVar(&o.hubBin, "hub-bin", "", "meridian-hub program; empty: go build it into D/bin")
	f.StringVar(&o.agentBin, "agent-bin", "", "meridian-agent program; empty: go build it into D/bin")
	leaderHelp := "the hubs' --leader-ttl"
	if leaderTTL == 0 {
		leaderHelp += "; 0: meridian-hub's default"
	}
	f.DurationVar(&o.leaderTTL, "leader-ttl", leaderTTL, leaderHelp)
	f.DurationVar(&o.schedule, "schedule-period", 0, "the hubs' --schedule-period; 0: meridian-hub's default")
	_ = cmd.MarkFlagRequired("dir")
}

func up(ctx context.Context, o upOptions, stdout, stderr io.Writer) error {
	if o.hubs < 1 || o.agents < 1 {
		return errors.New("--hubs and --agents must be at least 1")
	}
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--dir: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find meridian-soak's own program: %w", err)
	}
	hubBin, agentBin, err := binaries(ctx, o, filepath.Join(dir, "bin"), stdout, stderr)
	if err != nil {
		return err
	}
	t, err := topology.Up(ctx, topology.Config{
		Dir: dir, HubBin: hubBin, AgentBin: agentBin, SoakBin: self,
		Hubs: o.hubs, Agents: o.agents, TimeScale: o.timeScale,
		LeaderTTL: o.leaderTTL, SchedulePeriod: o.schedule, Progress: stdout,
	})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(stdout, "soak: stopping every process")
		t.Close()
		fmt.Fprintln(stdout, "soak: stopped")
	}()
	printEndpoints(ctx, stdout, t)
	<-ctx.Done()
	return nil
}

// binaries returns the hub and agent programs: the flags', or built with
// go build into bin from the module in the working directory.
func binaries(ctx context.Context, o upOptions, bin string, stdout, stderr io.Writer) (hub, agent string, err error) {
	if o.hubBin != "" && o.agentBin != "" {
		return o.hubBin, o.agentBin, nil
	}
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if err != nil || strings.TrimSpace(string(gomod)) == "" || strings.TrimSpace(string(gomod)) == os.DevNull {
		return "", "", errors.New("--hub-bin and --agent-bin are needed outside the Meridian module (or run from its checkout, where they are built)")
	}
	fmt.Fprintf(stdout, "soak: building meridian-hub and meridian-agent into %s\n", bin)
	build := exec.CommandContext(ctx, "go", "build", "-o", bin+string(filepath.Separator), "./cmd/meridian-hub", "./cmd/meridian-agent")
	build.Dir, build.Stdout, build.Stderr = root, stderr, stderr
	if err := build.Run(); err != nil {
		return "", "", fmt.Errorf("go build: %w", err)
	}
	hub, agent = filepath.Join(bin, "meridian-hub"), filepath.Join(bin, "meridian-agent")
	if o.hubBin != "" {
		hub = o.hubBin
	}
	if o.agentBin != "" {
		agent = o.agentBin
	}
	return hub, agent, nil
}

func printEndpoints(ctx context.Context, w io.Writer, t *topology.Topology) {
	fmt.Fprintln(w, "\nsoak: everything is up")
	fmt.Fprintf(w, "  etcd    %s\n", strings.Join(t.EtcdEndpoints(), ","))
	fmt.Fprintf(w, "  NATS    %s (JetStream streams R3)\n", t.NATSURLs())
	leader := "none yet"
	if l, err := t.Leader(ctx); err == nil {
		leader = l.ID
	}
	for _, h := range t.Hubs {
		fmt.Fprintf(w, "  %-7s gRPC %s  REST http://%s/v1/workloads  pid %d\n", h.ID, h.GRPC, h.HTTP, h.Proc.Pid())
	}
	fmt.Fprintf(w, "  leader  %s\n", leader)
	var ids []string
	for _, a := range t.Agents {
		ids = append(ids, a.ClusterID)
	}
	fmt.Fprintf(w, "  agents  %s (READY)\n", strings.Join(ids, ", "))
	fmt.Fprintf(w, "  token   %s (admin API token every hub accepts)\n", t.TokenFile)
	fmt.Fprintf(w, "  logs    %s\n", t.Group.LogDir())
	fmt.Fprintf(w, "  try     meridianctl --hub %s --token-file %s clusters\n", t.Hubs[0].GRPC, t.TokenFile)
	fmt.Fprintln(w, "Ctrl-C stops everything.")
}
