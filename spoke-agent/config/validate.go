package config

import (
	"fmt"
	"log/slog"
	"maps"
	"net"
	"regexp"
	"slices"
	"strings"

	cc "github.com/meridian-gpu/meridian/internal/componentconfig"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// NewSchema returns the schema componentconfig loads an
// AgentConfiguration with.
func NewSchema() *cc.Schema[AgentConfiguration] {
	return &cc.Schema[AgentConfiguration]{
		APIVersion: APIVersion,
		Kind:       Kind,
		Fields:     Fields,
		Defaults:   Default,
		Validate:   Validate,
	}
}

// Validate checks c and returns every problem, each naming its field
// path. Only the chosen connector's section is checked (besides the
// simcluster file, which no other connector may be given). It reads no
// file.
func Validate(c *AgentConfiguration) cc.ErrorList {
	var errs cc.ErrorList
	if c.ClusterID == "" {
		errs.Addf("clusterID", "required")
	} else if err := natsbus.ValidateClusterID(c.ClusterID); err != nil {
		errs.Addf("clusterID", "%s", strings.TrimPrefix(err.Error(), "natsbus: "))
	}
	if strings.TrimSpace(c.NATS.URL) == "" {
		errs.Addf("nats.url", "required (--nats-url or env MERIDIAN_NATS_URL)")
	}
	if c.NATS.ConnectTimeout <= 0 {
		errs.Addf("nats.connectTimeout", "must be positive (got %s)", c.NATS.ConnectTimeout)
	}
	switch c.Connector {
	case ConnectorSimcluster:
		if (c.Simcluster.Config == "") == (c.Simcluster.Example == "") {
			errs.Addf("simcluster", "give exactly one of simcluster.config (--sim-config) or simcluster.example (--sim-example) with connector simcluster")
		}
	case ConnectorSlurm, ConnectorKubernetes:
		for _, f := range []struct{ path, v string }{{"simcluster.config", c.Simcluster.Config}, {"simcluster.example", c.Simcluster.Example}} {
			if f.v != "" {
				errs.Addf(f.path, "only applies to connector simcluster (the connector is %s)", c.Connector)
			}
		}
		if c.Connector == ConnectorSlurm {
			validateSlurm(&errs, &c.Slurm)
		} else {
			validateKubernetes(&errs, &c.Kubernetes)
		}
	default:
		errs.Addf("connector", "want simcluster, slurm or kubernetes (got %q)", c.Connector)
	}
	if !(c.Simcluster.TimeScale > 0) || c.Simcluster.TimeScale > MaxTimeScale {
		errs.Addf("simcluster.timeScale", "must be in (0, 1000000] (got %v)", c.Simcluster.TimeScale)
	}
	if c.Simcluster.DefaultDuration < 0 {
		errs.Addf("simcluster.defaultDuration", "must not be negative (got %s)", c.Simcluster.DefaultDuration)
	}
	if c.HeartbeatInterval <= 0 {
		errs.Addf("heartbeatInterval", "must be positive (got %s)", c.HeartbeatInterval)
	}
	if c.AdvertiseInterval <= 0 {
		errs.Addf("advertiseInterval", "must be positive (got %s)", c.AdvertiseInterval)
	}
	if c.LaunchParallelism < 1 || c.LaunchParallelism > agent.MaxLaunchParallelism {
		errs.Addf("launchParallelism", "must be between 1 and %d (got %d)", agent.MaxLaunchParallelism, c.LaunchParallelism)
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			errs.Addf("metricsAddr", "want host:port, e.g. 127.0.0.1:9464 (got %q)", c.MetricsAddr)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Labels)) {
		if strings.TrimSpace(k) == "" {
			errs.Addf("labels", "a label name must not be empty")
		}
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.Logging.Level)); err != nil {
		errs.Addf("logging.level", "want debug, info, warn or error (got %q)", c.Logging.Level)
	}
	if c.Logging.Format != "text" && c.Logging.Format != "json" {
		errs.Addf("logging.format", "want text or json (got %q)", c.Logging.Format)
	}
	return errs
}

func validateSlurm(errs *cc.ErrorList, s *Slurm) {
	if !slices.Contains(SlurmCLIModes, s.CLI) {
		errs.Addf("slurm.cli", "want auto, on or off (got %q)", s.CLI)
	}
	if s.RESTURL == "" && s.CLI == "off" {
		errs.Addf("slurm.restURL", "connector slurm needs slurm.restURL (--slurm-rest-url) or the Slurm commands (slurm.cli auto or on)")
	}
	if s.RESTURL != "" && s.JWTKeyFile == "" && s.Token == "" {
		errs.Addf("slurm.jwtKeyFile", "slurm.restURL needs slurm.jwtKeyFile (--slurm-jwt-key-file) or a token in env MERIDIAN_SLURM_TOKEN")
	}
	if s.PollInterval <= 0 {
		errs.Addf("slurm.pollInterval", "must be positive (got %s)", s.PollInterval)
	}
	for _, k := range slices.Sorted(maps.Keys(s.GPUMemoryMiB)) {
		if s.GPUMemoryMiB[k] <= 0 {
			errs.Addf("slurm.gpuMemoryMiB."+k, "want a positive number of MiB (got %d)", s.GPUMemoryMiB[k])
		}
	}
}

// k8sName is the connector's namespace pattern.
var k8sName = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)

func validateKubernetes(errs *cc.ErrorList, k *Kubernetes) {
	if !k8sName.MatchString(k.Namespace) {
		errs.Addf("kubernetes.namespace", "%q is not a valid namespace name", k.Namespace)
	}
	if k.RackLabel == "" {
		errs.Addf("kubernetes.rackLabel", "must not be empty")
	}
	seen := map[string]bool{}
	for i, m := range k.FractionalModes {
		p := fmt.Sprintf("kubernetes.fractionalModes[%d]", i)
		switch {
		case !slices.Contains(FractionalModes, m):
			errs.Addf(p, "%q: want hami, kai, mig or time-slicing", m)
		case seen[m]:
			errs.Addf(p, "%q: listed twice", m)
		}
		seen[m] = true
	}
	if k.SharedReplicas < 0 || k.SharedReplicas > MaxSharedReplicas {
		errs.Addf("kubernetes.sharedReplicas", "want 1..%d, or 0 for 1 (got %d)", MaxSharedReplicas, k.SharedReplicas)
	}
	switch k.Gang {
	case "none", "coscheduling":
	case "kueue":
		if k.KueueQueue == "" {
			errs.Addf("kubernetes.kueueQueue", "required with gang kueue")
		}
	default:
		errs.Addf("kubernetes.gang", "want none, coscheduling or kueue (got %q)", k.Gang)
	}
}
