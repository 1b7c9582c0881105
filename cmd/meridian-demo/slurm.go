package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meridian-gpu/meridian/connectors/slurm"
	"github.com/meridian-gpu/meridian/internal/demo"
	"github.com/meridian-gpu/meridian/internal/e2e/slurmhub"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// slurmClusterID is the real Slurm spoke's id in `make demo-slurm`.
const slurmClusterID = "slurm-local"

// exitNeedsRoot is the exit code when --slurm runs without root, the same
// as scripts/slurm-up.sh's.
const exitNeedsRoot = 3

// slurmSpoke starts the local Slurm cluster (scripts/slurm-up.sh) and
// returns it as the demo's real spoke, in the place of us-east, and a
// function that closes its connector. Every workload of the mix becomes a
// batch script that sleeps for its duration in real time and exits with
// its exit code; the job outputs and the connector's log go to a
// temporary directory.
func slurmSpoke(ctx context.Context, stderr io.Writer) (*demo.Spoke, func(), error) {
	fmt.Fprintf(stderr, "meridian demo: starting the local Slurm cluster (scripts/slurm-up.sh; the first run installs the Debian packages)\n")
	local, err := slurmhub.Up(ctx)
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "meridian-demo-slurm-")
	if err != nil {
		return nil, nil, fmt.Errorf("slurm job directory: %w", err)
	}
	logFile, err := os.Create(filepath.Join(dir, "connector.log"))
	if err != nil {
		return nil, nil, fmt.Errorf("slurm connector log: %w", err)
	}
	cfg := local.Config(slurmClusterID)
	cfg.Labels = map[string]string{"scheduler": "slurm", "site": "local"}
	cfg.PollInterval = 500 * time.Millisecond
	cfg.Workdir = dir
	cfg.Logger = slog.New(slog.NewTextHandler(logFile, nil)).With("connector", "slurm")
	conn, err := slurm.New(cfg)
	if err != nil {
		logFile.Close()
		return nil, nil, fmt.Errorf("slurm connector: %w", err)
	}
	closeAll := func() { conn.Close(); logFile.Close() }
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	inv, err := conn.Inventory(ictx)
	cancel()
	if err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("slurm inventory: %w", err)
	}
	gpus := map[string]int64{}
	nodes := 0
	for _, n := range inv.Nodes {
		if c := n.GetAcceleratorClass(); c != "" && len(n.GetGpus()) > 0 {
			gpus[c] += int64(len(n.GetGpus()))
			nodes++
		}
	}
	if len(gpus) == 0 {
		closeAll()
		return nil, nil, errors.New("slurm inventory: the local Slurm cluster advertises no GPUs")
	}
	var total int64
	for _, n := range gpus {
		total += n
	}
	return &demo.Spoke{
		ID:        slurmClusterID,
		What:      fmt.Sprintf("REAL Slurm: %d nodes, %d GPUs (slurmctld, slurmd, slurmrestd on loopback; jobs in %s)", nodes, total, dir),
		Replaces:  "us-east",
		Connector: conn,
		GPUs:      gpus,
		Runtime: func(run time.Duration, exitCode int) *meridianv1.RuntimeTemplate {
			return &meridianv1.RuntimeTemplate{Kind: &meridianv1.RuntimeTemplate_Slurm{Slurm: &meridianv1.SlurmTemplate{
				Script:    fmt.Sprintf("#!/bin/bash\n# meridian demo workload\nsleep %.3f\nexit %d\n", run.Seconds(), exitCode),
				Workdir:   dir,
				TimeLimit: durationpb.New(10 * time.Minute),
			}}}
		},
		Launches: func() int { return int(conn.Counters().Submits.Load()) },
	}, closeAll, nil
}
