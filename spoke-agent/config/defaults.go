package config

import (
	"time"

	cc "github.com/meridian-gpu/meridian/internal/componentconfig"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// Defaults and allowed values. The Kubernetes ones repeat
// connectors/kubernetes's constants (cmd/meridian-agent tests that they
// agree).
const (
	DefaultConnectTimeout    = 30 * time.Second
	DefaultSlurmPollInterval = 2 * time.Second
	DefaultK8sNamespace      = "default"
	DefaultK8sRackLabel      = "topology.kubernetes.io/rack"
	MaxTimeScale             = 1e6
	MaxSharedReplicas        = 1000
	DefaultVaultKVMount      = "secret"
	DefaultVaultPKIMount     = "pki"
	DefaultVaultCredsKey     = "creds"
	DefaultVaultKVRefresh    = 5 * time.Minute
)

// VaultAuthMethods are the Vault auth methods the agent logs in with.
var VaultAuthMethods = []string{"token", "approle", "kubernetes"}

// FractionalModes and GangModes the Kubernetes connector knows.
var (
	FractionalModes = []string{"hami", "kai", "mig", "time-slicing"}
	GangModes       = []string{"none", "coscheduling", "kueue"}
	SlurmCLIModes   = []string{"auto", "on", "off"}
)

// Default returns a configuration holding every default. ClusterID and
// NATS.URL have none: they are required.
func Default() *AgentConfiguration {
	return &AgentConfiguration{
		APIVersion:        APIVersion,
		Kind:              Kind,
		Connector:         ConnectorSimcluster,
		Labels:            map[string]string{},
		HeartbeatInterval: cc.Duration(agent.DefaultHeartbeatInterval),
		AdvertiseInterval: cc.Duration(agent.DefaultAdvertiseInterval),
		LaunchParallelism: agent.DefaultLaunchParallelism,
		NATS:              NATS{ConnectTimeout: cc.Duration(DefaultConnectTimeout)},
		Logging:           Logging{Level: "info", Format: "text"},
		Simcluster:        Simcluster{TimeScale: 1},
		Slurm: Slurm{CLI: "auto", PollInterval: cc.Duration(DefaultSlurmPollInterval),
			Classes: map[string]string{}, GPUMemoryMiB: map[string]int64{}},
		Kubernetes: Kubernetes{Namespace: DefaultK8sNamespace, RackLabel: DefaultK8sRackLabel, SharedReplicas: 1, Gang: "none",
			FractionalModes: []string{}, Tolerate: []string{}, Classes: map[string]string{}, NodeSelector: map[string]string{}},
		Vault: Vault{KVMount: DefaultVaultKVMount, PKIMount: DefaultVaultPKIMount, NATSCredsKey: DefaultVaultCredsKey,
			KVRefresh: cc.Duration(DefaultVaultKVRefresh)},
	}
}
