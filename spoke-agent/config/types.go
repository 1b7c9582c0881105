package config

import cc "github.com/meridian-gpu/meridian/internal/componentconfig"

// The version and kind an agent configuration file declares.
const (
	APIVersion = "meridian.io/v1alpha1"
	Kind       = "AgentConfiguration"
)

// The connectors.
const (
	ConnectorSimcluster = "simcluster"
	ConnectorSlurm      = "slurm"
	ConnectorKubernetes = "kubernetes"
)

// AgentConfiguration is everything one agent is configured with.
type AgentConfiguration struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	// ClusterID names the cluster (letters, digits, '-', '_'; at most 64).
	ClusterID string `yaml:"clusterID"`
	// Connector is the cluster backend: simcluster, slurm or kubernetes.
	Connector string `yaml:"connector"`
	// Labels are matched by workloads' cluster selectors (slurm and
	// kubernetes; simcluster labels come from its file).
	Labels            map[string]string `yaml:"labels"`
	HeartbeatInterval cc.Duration       `yaml:"heartbeatInterval"`
	AdvertiseInterval cc.Duration       `yaml:"advertiseInterval"`
	LaunchParallelism int               `yaml:"launchParallelism"`
	// MetricsAddr serves Prometheus /metrics; empty: off.
	MetricsAddr string     `yaml:"metricsAddr"`
	NATS        NATS       `yaml:"nats"`
	Logging     Logging    `yaml:"logging"`
	Simcluster  Simcluster `yaml:"simcluster"`
	Slurm       Slurm      `yaml:"slurm"`
	Kubernetes  Kubernetes `yaml:"kubernetes"`
	// Vault, when vault.addr is set, supplies the NATS credentials (KV v2)
	// and the NATS client certificate (PKI) instead of files.
	Vault Vault `yaml:"vault"`
}

// Vault is where the agent gets its NATS secrets when they do not come
// from files (docs/vault.md).
type Vault struct {
	// Addr turns Vault on, e.g. https://vault.example:8200.
	Addr   string `yaml:"addr"`
	CAFile string `yaml:"caFile"`
	// Auth is token, approle or kubernetes.
	Auth      string `yaml:"auth"`
	AuthMount string `yaml:"authMount"`
	// Role is the Kubernetes auth role.
	Role                string `yaml:"role"`
	TokenFile           string `yaml:"tokenFile"`
	AppRoleRoleIDFile   string `yaml:"appRoleRoleIDFile"`
	AppRoleSecretIDFile string `yaml:"appRoleSecretIDFile"`
	KubernetesTokenFile string `yaml:"kubernetesTokenFile"`
	// KVMount and NATSCredsPath name the KV v2 secret holding the NATS
	// credentials under NATSCredsKey; empty path: not from Vault.
	KVMount       string      `yaml:"kvMount"`
	NATSCredsPath string      `yaml:"natsCredsPath"`
	NATSCredsKey  string      `yaml:"natsCredsKey"`
	KVRefresh     cc.Duration `yaml:"kvRefresh"`
	// PKIMount and PKIRole sign the NATS client certificate; empty role:
	// not from Vault.
	PKIMount      string      `yaml:"pkiMount"`
	PKIRole       string      `yaml:"pkiRole"`
	PKICommonName string      `yaml:"pkiCommonName"`
	PKITTL        cc.Duration `yaml:"pkiTTL"`
}

// NATS is the connection to the hub's NATS.
type NATS struct {
	URL            string      `yaml:"url"`
	ConnectTimeout cc.Duration `yaml:"connectTimeout"`
	CredsFile      string      `yaml:"credsFile"`
	NKeyFile       string      `yaml:"nkeyFile"`
	User           string      `yaml:"user"`
	Password       string      `yaml:"password"`
	PasswordFile   string      `yaml:"passwordFile"`
	Token          string      `yaml:"token"`
	TokenFile      string      `yaml:"tokenFile"`
	TLS            NATSTLS     `yaml:"tls"`
}

// NATSTLS is TLS to NATS.
type NATSTLS struct {
	CAFile   string `yaml:"caFile"`
	CertFile string `yaml:"certFile"`
	KeyFile  string `yaml:"keyFile"`
}

// Logging is the agent's own log.
type Logging struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
}

// Simcluster configures the in-memory simulated cluster.
type Simcluster struct {
	// Config is a cluster description file; Example a built-in one.
	// Exactly one is given with connector simcluster.
	Config          string      `yaml:"config"`
	Example         string      `yaml:"example"`
	TimeScale       float64     `yaml:"timeScale"`
	DefaultDuration cc.Duration `yaml:"defaultDuration"`
}

// Slurm configures the Slurm connector.
type Slurm struct {
	RESTURL      string            `yaml:"restURL"`
	Token        string            `yaml:"token"`
	User         string            `yaml:"user"`
	JWTKeyFile   string            `yaml:"jwtKeyFile"`
	CLI          string            `yaml:"cli"`
	BinDir       string            `yaml:"binDir"`
	Conf         string            `yaml:"conf"`
	Partition    string            `yaml:"partition"`
	PollInterval cc.Duration       `yaml:"pollInterval"`
	Classes      map[string]string `yaml:"classes"`
	GPUMemoryMiB map[string]int64  `yaml:"gpuMemoryMiB"`
}

// Kubernetes configures the Kubernetes connector.
type Kubernetes struct {
	Kubeconfig      string            `yaml:"kubeconfig"`
	Namespace       string            `yaml:"namespace"`
	RackLabel       string            `yaml:"rackLabel"`
	FractionalModes []string          `yaml:"fractionalModes"`
	SharedReplicas  int               `yaml:"sharedReplicas"`
	Gang            string            `yaml:"gang"`
	KueueQueue      string            `yaml:"kueueQueue"`
	KAIQueue        string            `yaml:"kaiQueue"`
	Tolerate        []string          `yaml:"tolerate"`
	Classes         map[string]string `yaml:"classes"`
	NodeSelector    map[string]string `yaml:"nodeSelector"`
}
