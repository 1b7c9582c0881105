package config

import (
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/url"
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
	validateVault(&errs, c)
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

func validateVault(errs *cc.ErrorList, c *AgentConfiguration) {
	v := &c.Vault
	if v.Addr == "" {
		for _, f := range []struct{ path, v string }{{"vault.auth", v.Auth}, {"vault.natsCredsPath", v.NATSCredsPath}, {"vault.pkiRole", v.PKIRole}} {
			if f.v != "" {
				errs.Addf(f.path, "needs vault.addr (--vault-addr)")
			}
		}
		return
	}
	if u, err := url.Parse(v.Addr); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs.Addf("vault.addr", "want http(s)://host:port (got %q)", v.Addr)
	}
	switch v.Auth {
	case "token":
		if v.TokenFile == "" {
			errs.Addf("vault.tokenFile", "required with vault.auth token (--vault-token-file)")
		}
	case "approle":
		if v.AppRoleRoleIDFile == "" {
			errs.Addf("vault.appRoleRoleIDFile", "required with vault.auth approle (--vault-approle-role-id-file)")
		}
		if v.AppRoleSecretIDFile == "" {
			errs.Addf("vault.appRoleSecretIDFile", "required with vault.auth approle (--vault-approle-secret-id-file)")
		}
	case "kubernetes":
		if v.Role == "" {
			errs.Addf("vault.role", "required with vault.auth kubernetes (--vault-role)")
		}
	case "":
		errs.Addf("vault.auth", "required with vault.addr: token, approle or kubernetes (--vault-auth)")
	default:
		errs.Addf("vault.auth", "want token, approle or kubernetes (got %q)", v.Auth)
	}
	if v.NATSCredsPath == "" && v.PKIRole == "" {
		errs.Addf("vault", "vault.addr is set but nothing comes from Vault: give vault.natsCredsPath (--vault-nats-creds-path) and/or vault.pkiRole (--vault-pki-role)")
	}
	if v.NATSCredsPath != "" {
		n := c.NATS
		if n.CredsFile != "" || n.NKeyFile != "" || n.User != "" || n.TokenFile != "" || n.Token != "" {
			errs.Addf("vault.natsCredsPath", "the NATS credential comes from Vault; do not also give nats.credsFile, nkeyFile, user or token")
		}
		if strings.Trim(v.KVMount, "/") == "" {
			errs.Addf("vault.kvMount", "required with vault.natsCredsPath")
		}
		if v.NATSCredsKey == "" {
			errs.Addf("vault.natsCredsKey", "required with vault.natsCredsPath")
		}
		if v.KVRefresh <= 0 {
			errs.Addf("vault.kvRefresh", "must be positive (got %s)", v.KVRefresh)
		}
	}
	if v.PKIRole != "" {
		if c.NATS.TLS.CertFile != "" || c.NATS.TLS.KeyFile != "" {
			errs.Addf("vault.pkiRole", "the NATS client certificate comes from Vault; do not also give nats.tls.certFile or keyFile")
		}
		if strings.Trim(v.PKIMount, "/") == "" {
			errs.Addf("vault.pkiMount", "required with vault.pkiRole")
		}
		if v.PKITTL < 0 {
			errs.Addf("vault.pkiTTL", "must not be negative (got %s)", v.PKITTL)
		}
	}
}
