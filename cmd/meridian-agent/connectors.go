package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/meridian-gpu/meridian/connectors/kubernetes"
	"github.com/meridian-gpu/meridian/connectors/simcluster"
	"github.com/meridian-gpu/meridian/connectors/slurm"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
	agentconfig "github.com/meridian-gpu/meridian/spoke-agent/config"
)

// EnvSimLaunchJournal names a file the simulated cluster appends its launch
// journal to (simcluster.JournalEntry lines: every launch, repeat and end),
// for the soak's "no dispatch launched twice" check. Unset: no journal.
const EnvSimLaunchJournal = "MERIDIAN_SIM_LAUNCH_JOURNAL"

// buildConnector turns the checked configuration into a connector and its
// closer.
func buildConnector(o *options, log *slog.Logger) (agent.Connector, func(), error) {
	c := o.conf
	switch c.Connector {
	case agentconfig.ConnectorKubernetes:
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := kubernetes.New(ctx, k8sConfig(o, log))
		if err != nil {
			return nil, nil, fmt.Errorf("--connector kubernetes: %w", err)
		}
		return conn, conn.Close, nil
	case agentconfig.ConnectorSlurm:
		s := c.Slurm
		cfg := slurm.Config{
			RESTURL: s.RESTURL, User: s.User, Token: s.Token, JWTKeyFile: s.JWTKeyFile,
			BinDir: s.BinDir, SlurmConf: s.Conf, Partition: s.Partition, ClusterID: c.ClusterID,
			Labels: c.Labels, Classes: s.Classes, PollInterval: s.PollInterval.D(), Logger: log,
		}
		if s.CLI != "auto" {
			on := s.CLI == "on"
			cfg.CLI = &on
		}
		if len(s.GPUMemoryMiB) > 0 {
			cfg.GPUMemoryMiB = s.GPUMemoryMiB
		}
		conn, err := slurm.New(cfg)
		if err != nil {
			return nil, nil, fmt.Errorf("--connector slurm: %w", err)
		}
		log.Info("slurm connector ready", "rest_url", s.RESTURL, "cli", s.CLI, "partition", s.Partition)
		return conn, conn.Close, nil
	default:
		sc := c.Simcluster
		var cfg *simcluster.Config
		var err error
		if sc.Example != "" {
			if cfg, err = simcluster.Example(sc.Example); err != nil {
				return nil, nil, fmt.Errorf("--sim-example: %w", err)
			}
		} else if cfg, err = simcluster.LoadConfig(sc.Config); err != nil {
			return nil, nil, fmt.Errorf("--sim-config: %w", err)
		}
		clock, err := simcluster.NewScaledClock(sc.TimeScale)
		if err != nil {
			return nil, nil, fmt.Errorf("--time-scale: %w", err)
		}
		opts := simcluster.Options{Clock: clock, Logger: log, DefaultDuration: sc.DefaultDuration.D()}
		var journal *os.File
		if path := os.Getenv(EnvSimLaunchJournal); path != "" {
			if journal, err = os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", EnvSimLaunchJournal, err)
			}
			opts.Journal = journal
		}
		sim, err := simcluster.New(cfg, opts)
		if err != nil {
			if journal != nil {
				journal.Close()
			}
			return nil, nil, err
		}
		log.Info("simulated cluster ready", "nodes", len(cfg.Nodes), "gpus", cfg.TotalGPUs(), "time_scale", sc.TimeScale, "launch_journal", os.Getenv(EnvSimLaunchJournal))
		closer := sim.Close
		if journal != nil {
			closer = func() { sim.Close(); journal.Close() }
		}
		return sim, closer, nil
	}
}

// k8sConfig turns the kubernetes section into the connector's config.
func k8sConfig(o *options, log *slog.Logger) kubernetes.Config {
	c, k := o.conf, o.conf.Kubernetes
	cfg := kubernetes.Config{
		Kubeconfig: k.Kubeconfig, Namespace: k.Namespace, ClusterID: c.ClusterID, Labels: c.Labels,
		RackLabel: k.RackLabel, NodeSelector: k.NodeSelector, SharedReplicas: k.SharedReplicas,
		Gang: k.Gang, KueueQueue: k.KueueQueue, KAIQueue: k.KAIQueue, Classes: k.Classes, Logger: log,
		FractionalModes: k.FractionalModes,
	}
	for _, key := range k.Tolerate {
		cfg.Tolerations = append(cfg.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	}
	return cfg
}
