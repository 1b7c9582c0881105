package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meridian-gpu/meridian/internal/soak/faults"
	soakrun "github.com/meridian-gpu/meridian/internal/soak/run"
)

// errInvariant makes the command exit non-zero after printing the summary.
var errInvariant = errors.New("an invariant broke (see the summary's failures)")

// runOptions are meridian-soak run's flags.
type runOptions struct {
	up               upOptions
	duration, settle time.Duration
	warmup           time.Duration
	seed             uint64
	rate             float64
	clusterTimeout   time.Duration
	faultKinds       string
	maxInFlight      int
	soakBin, soakEnv string
}

func runCommand(stdout, stderr io.Writer) *cobra.Command {
	var o runOptions
	cmd := &cobra.Command{
		Use:   "run --dir D --duration 3m --seed N [--rate 500] [--hubs 3] [--agents 4]",
		Short: "Chaos soak: the production shape under a steady load while a seeded schedule of faults hits it; checks the invariants and prints a JSON summary as the last line",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return soak(cmd.Context(), o, stdout, stderr)
		},
	}
	o.up.flags(cmd, fmt.Sprintf("%d H100s", soakrun.GPUsPerCluster), 3*time.Second)
	f := cmd.Flags()
	f.DurationVar(&o.clusterTimeout, "cluster-timeout", 15*time.Second, "the hubs' --cluster-timeout (agents are paused for less and for more)")
	f.DurationVar(&o.duration, "duration", 3*time.Minute, "how long the load runs (faults run inside it)")
	f.DurationVar(&o.warmup, "warmup", 15*time.Second, "fault-free time at the start")
	f.DurationVar(&o.settle, "settle", 90*time.Second, "the longest wait, after the load, for in-flight work to finish")
	f.Uint64Var(&o.seed, "seed", 0, "seed of the load and the fault schedule; 0: from the clock (printed, to replay)")
	f.Float64Var(&o.rate, "rate", 500, "submits per second")
	f.IntVar(&o.maxInFlight, "max-in-flight", 5000, "hold the load back while more workloads are in flight")
	f.StringVar(&o.faultKinds, "faults", "", "fault kinds to draw from, comma-separated; empty: all ("+kindNames()+")")
	return cmd
}

func kindNames() string {
	var out []string
	for _, k := range faults.AllKinds() {
		out = append(out, string(k))
	}
	return strings.Join(out, ", ")
}

func parseKinds(s string) ([]faults.Kind, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	known := map[string]bool{}
	for _, k := range faults.AllKinds() {
		known[string(k)] = true
	}
	var out []faults.Kind
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		if !known[k] {
			return nil, fmt.Errorf("--faults: unknown kind %q (known: %s)", k, kindNames())
		}
		out = append(out, faults.Kind(k))
	}
	return out, nil
}

func soak(ctx context.Context, o runOptions, stdout, stderr io.Writer) error {
	if o.up.hubs < 2 || o.up.agents < 2 {
		return errors.New("--hubs and --agents must be at least 2 (a leader to kill, a cluster to lose)")
	}
	if o.rate <= 0 || o.duration < 30*time.Second {
		return errors.New("--rate must be positive and --duration at least 30s")
	}
	kinds, err := parseKinds(o.faultKinds)
	if err != nil {
		return err
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano() % 1_000_000_000)
	}
	dir, err := filepath.Abs(o.up.dir)
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
	hubBin, agentBin, err := binaries(ctx, o.up, filepath.Join(dir, "bin"), stdout, stderr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "soak: seed %d (replay: meridian-soak run --seed %d --duration %s --rate %g --hubs %d --agents %d)\n",
		o.seed, o.seed, o.duration, o.rate, o.up.hubs, o.up.agents)
	sum, err := soakrun.Run(ctx, soakrun.Config{
		Dir: dir, HubBin: hubBin, AgentBin: agentBin, SoakBin: self,
		Hubs: o.up.hubs, Agents: o.up.agents, Duration: o.duration, Seed: o.seed, Rate: o.rate,
		Warmup: o.warmup, Settle: o.settle, LeaderTTL: o.up.leaderTTL, ClusterTimeout: o.clusterTimeout,
		SchedulePeriod: o.up.schedule, Kinds: kinds, MaxInFlight: o.maxInFlight, Out: stdout,
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "soak: fault timeline")
	for _, r := range sum.Timeline {
		restored := "never"
		if !r.Restored.IsZero() {
			restored = r.Restored.Format("15:04:05.000")
		}
		fmt.Fprintf(stdout, "  %s %-17s %-22s hold %-6s restored %s %s\n", r.Injected.Format("15:04:05.000"), r.Kind, r.Target, r.Hold, restored, r.Err)
	}
	for _, s := range sum.Samples {
		fmt.Fprintln(stdout, "soak: note:", s)
	}
	b, err := json.Marshal(sum)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, string(b))
	if !sum.OK {
		return errInvariant
	}
	return nil
}
