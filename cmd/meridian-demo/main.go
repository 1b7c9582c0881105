package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/meridian-gpu/meridian/internal/demo"
)

func main() {
	o := demo.DefaultOptions()
	fs := flag.NewFlagSet("meridian-demo", flag.ContinueOnError)
	fs.IntVar(&o.Workloads, "workloads", o.Workloads, "how many workloads to submit")
	fs.Int64Var(&o.Seed, "seed", o.Seed, "seed of the workload mix")
	fs.Float64Var(&o.TimeScale, "time-scale", o.TimeScale, "simulated seconds per real second in the clusters")
	fs.DurationVar(&o.Deadline, "deadline", o.Deadline, "print the summary after this long even if work remains")
	fs.BoolVar(&o.Forever, "forever", false, "keep running after the summary until Ctrl-C")
	fs.StringVar(&o.GRPCAddr, "grpc-addr", o.GRPCAddr, "hub gRPC address to try first (a free port is used if taken)")
	fs.StringVar(&o.HTTPAddr, "http-addr", o.HTTPAddr, "hub REST address to try first (a free port is used if taken)")
	fs.StringVar(&o.DataDir, "data-dir", "", "keep etcd, NATS and the log here (default: a temporary directory)")
	live := fs.String("live", "auto", "redraw a live table: auto (when stdout is a terminal), always or never")
	withSlurm := fs.Bool("slurm", false, "replace the simulated us-east with the local real Slurm cluster (root; starts it with scripts/slurm-up.sh)")
	withK8s := fs.Bool("k8s", false, "add the local real Kubernetes control plane (KWOK GPU nodes) to the simulated clusters (root; starts it with scripts/k8s-up.sh)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		os.Exit(2)
	}
	switch *live {
	case "always":
		o.Live = true
	case "never":
	case "auto":
		if fi, err := os.Stdout.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			o.Live = true
		}
	default:
		fmt.Fprintf(os.Stderr, "meridian-demo: --live: want auto, always or never, got %q\n", *live)
		os.Exit(2)
	}
	if *withSlurm && os.Geteuid() != 0 {
		fmt.Fprintf(os.Stderr, "meridian-demo: --slurm (make demo-slurm) needs root: it starts real Slurm daemons on this machine "+
			"(scripts/slurm-up.sh installs munge, slurmctld, slurmd and slurmrestd and runs them as root). "+
			"Run it as root, e.g. sudo make demo-slurm, or run make demo for the all-simulated federation.\n")
		os.Exit(exitNeedsRoot)
	}
	if *withSlurm && *withK8s {
		fmt.Fprintf(os.Stderr, "meridian-demo: --slurm and --k8s: choose one\n")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *withK8s {
		spoke, closeSpoke, err := demo.KubernetesSpoke(ctx, os.Stderr)
		if demo.KubernetesUnavailable(err) {
			skipK8s(err)
			return
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "meridian-demo: --k8s: %v\n", err)
			os.Exit(1)
		}
		defer closeSpoke()
		o.Real = spoke
	}
	if *withSlurm {
		spoke, closeSpoke, err := slurmSpoke(ctx, os.Stderr)
		if err != nil {
			fmt.Fprintf(os.Stderr, "meridian-demo: --slurm: %v\n", err)
			os.Exit(1)
		}
		defer closeSpoke()
		o.Real = spoke
		// The real cluster has half of us-east's H100s and runs the work in
		// real time, so the same mix needs longer unless told otherwise.
		explicit := false
		fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "deadline" })
		if !explicit {
			o.Deadline += time.Minute
		}
	}
	if _, err := demo.Run(ctx, o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "meridian-demo: %v\n", err)
		os.Exit(1)
	}
}

// skipK8s says, loudly, why `make demo-k8s` cannot run here. It is a skip,
// not a failure (exit 0), as the real-Kubernetes tests skip.
func skipK8s(err error) {
	const bar = "**********************************************************************"
	fmt.Fprintf(os.Stderr, "%s\nSKIPPED make demo-k8s: %v\n"+
		"Run it as root (e.g. sudo make demo-k8s), or run make demo for the all-simulated federation.\n%s\n", bar, err, bar)
}
