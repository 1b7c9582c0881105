package config

import (
	cc "github.com/meridian-gpu/meridian/internal/componentconfig"
)

// The version and kind a hub configuration file declares.
const (
	APIVersion = "meridian.io/v1alpha1"
	Kind       = "HubConfiguration"
)

// HubConfiguration is everything one hub replica is configured with.
type HubConfiguration struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	// HubID names this replica in the leader election; empty means the
	// id kept in <data-dir>/hub-id (made on first start), or
	// "<hostname>-<pid>" without a data directory.
	HubID string `yaml:"hubID"`
	// DataDir holds the embedded etcd and NATS data.
	DataDir string `yaml:"dataDir"`
	// AddrFile, when set, receives the listening addresses as JSON.
	AddrFile string `yaml:"addrFile"`
	// GCPercent is the garbage collector target; GOGC wins; 0 keeps Go's.
	GCPercent  int        `yaml:"gcPercent"`
	API        API        `yaml:"api"`
	Etcd       Etcd       `yaml:"etcd"`
	NATS       NATS       `yaml:"nats"`
	Scheduling Scheduling `yaml:"scheduling"`
	Retention  Retention  `yaml:"retention"`
	Auth       Auth       `yaml:"auth"`
	Audit      Audit      `yaml:"audit"`
	Logging    Logging    `yaml:"logging"`
	// Vault, when vault.addr is set, supplies the API's serving
	// certificate from its PKI engine instead of api.tls files.
	Vault Vault `yaml:"vault"`
}

// Vault is where the hub gets its API serving certificate (docs/vault.md).
type Vault struct {
	Addr                string      `yaml:"addr"`
	CAFile              string      `yaml:"caFile"`
	Auth                string      `yaml:"auth"`
	AuthMount           string      `yaml:"authMount"`
	Role                string      `yaml:"role"`
	TokenFile           string      `yaml:"tokenFile"`
	AppRoleRoleIDFile   string      `yaml:"appRoleRoleIDFile"`
	AppRoleSecretIDFile string      `yaml:"appRoleSecretIDFile"`
	KubernetesTokenFile string      `yaml:"kubernetesTokenFile"`
	PKIMount            string      `yaml:"pkiMount"`
	PKIRole             string      `yaml:"pkiRole"`
	PKICommonName       string      `yaml:"pkiCommonName"`
	PKIAltNames         []string    `yaml:"pkiAltNames"`
	PKIIPSANs           []string    `yaml:"pkiIPSANs"`
	PKITTL              cc.Duration `yaml:"pkiTTL"`
	// KVMount and EtcdPath name a KV v2 secret with the external etcd's
	// client credentials: keys username, password and, for TLS, ca, cert
	// and key (PEM).
	KVMount  string `yaml:"kvMount"`
	EtcdPath string `yaml:"etcdPath"`
}

// API is how the hub serves its gRPC and REST APIs.
type API struct {
	GRPCAddr        string `yaml:"grpcAddr"`
	HTTPAddr        string `yaml:"httpAddr"`
	MaxRequestBytes int    `yaml:"maxRequestBytes"`
	// TLS of both listeners; empty: plaintext.
	TLS TLS `yaml:"tls"`
	// AllowInsecureNonLoopback lets a listener beyond loopback run
	// without TLS. Not enforced yet: see PlaintextNonLoopback.
	AllowInsecureNonLoopback bool `yaml:"allowInsecureNonLoopback"`
}

// TLS is a server certificate and, for mutual TLS, the CA bundle client
// certificates must chain to.
type TLS struct {
	CertFile     string `yaml:"certFile"`
	KeyFile      string `yaml:"keyFile"`
	ClientCAFile string `yaml:"clientCAFile"`
}

// Enabled reports whether a certificate is configured.
func (t TLS) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" }

// Etcd is the state store: external endpoints, or the embedded server.
type Etcd struct {
	// Endpoints of an external etcd; empty runs etcd embedded.
	Endpoints []string `yaml:"endpoints"`
	// MaxTxnOps is the external etcd's --max-txn-ops; 0 means stock 128.
	MaxTxnOps int `yaml:"maxTxnOps"`
	// EmbeddedPort is the embedded etcd's loopback client port; 0: free.
	EmbeddedPort int `yaml:"embeddedPort"`
	// TLS to the external etcd; any file turns it on (https:// endpoints).
	TLS EtcdTLS `yaml:"tls"`
	// Username is an etcd user of the external etcd; its password comes
	// from PasswordFile or the environment (Password), never a flag.
	Username     string `yaml:"username"`
	Password     string `yaml:"password"`
	PasswordFile string `yaml:"passwordFile"`
}

// EtcdTLS is TLS to an external etcd: the CA bundle that signs its
// servers' certificates and, for mutual TLS (etcd's --client-cert-auth),
// the hub's client certificate and key.
type EtcdTLS struct {
	CAFile   string `yaml:"caFile"`
	CertFile string `yaml:"certFile"`
	KeyFile  string `yaml:"keyFile"`
}

// Enabled reports whether a TLS file is given.
func (t EtcdTLS) Enabled() bool { return t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" }

// NATS is the message bus: an external server with its credentials, or
// the embedded server.
type NATS struct {
	// URL of an external NATS with JetStream; empty runs NATS embedded.
	URL string `yaml:"url"`
	// EmbeddedPort is the embedded NATS's loopback port; 0: free.
	EmbeddedPort int `yaml:"embeddedPort"`
	// StreamReplicas is how many replicas the hub gives the JetStream
	// streams it creates or updates (their durable consumers inherit
	// it): 3 on a three-node NATS cluster, 1 on a single server. Every
	// hub replica must be given the same number.
	StreamReplicas int `yaml:"streamReplicas"`
	// One credential, read from a file (or, for the password and the
	// token, from the environment).
	CredsFile    string  `yaml:"credsFile"`
	NKeyFile     string  `yaml:"nkeyFile"`
	User         string  `yaml:"user"`
	Password     string  `yaml:"password"`
	PasswordFile string  `yaml:"passwordFile"`
	Token        string  `yaml:"token"`
	TokenFile    string  `yaml:"tokenFile"`
	TLS          NATSTLS `yaml:"tls"`
	// SpokeAuth gives each cluster's agent its own least-privilege NATS
	// credential (docs/design/spoke-identity.md).
	SpokeAuth NATSSpokeAuth `yaml:"spokeAuth"`
}

// NATSSpokeAuth is one NATS identity per cluster: the hub issues and
// revokes agents' credentials (meridianctl clusters register / revoke).
type NATSSpokeAuth struct {
	// Enabled turns it on. With the embedded NATS that is all: the hub
	// makes its own operator and accounts.
	Enabled bool `yaml:"enabled"`
	// OperatorSigningKeyFile (an operator signing key's seed, SO...) and
	// SystemCredsFile (a system-account user's .creds) are for an
	// external NATS: the hub signs and pushes its account with them.
	OperatorSigningKeyFile string `yaml:"operatorSigningKeyFile"`
	SystemCredsFile        string `yaml:"systemCredsFile"`
}

// NATSTLS is TLS to an external NATS.
type NATSTLS struct {
	CAFile   string `yaml:"caFile"`
	CertFile string `yaml:"certFile"`
	KeyFile  string `yaml:"keyFile"`
}

// AnyCredential reports whether a credential or TLS setting is given.
func (n NATS) AnyCredential() bool {
	return n.CredsFile != "" || n.NKeyFile != "" || n.User != "" || n.Password != "" || n.PasswordFile != "" ||
		n.Token != "" || n.TokenFile != "" || n.TLS.CAFile != "" || n.TLS.CertFile != "" || n.TLS.KeyFile != ""
}

// Scheduling tunes the leader election and the scheduling loop.
type Scheduling struct {
	// Disabled serves the API only: no election, no loop.
	Disabled       bool        `yaml:"disabled"`
	Period         cc.Duration `yaml:"period"`
	ClusterTimeout cc.Duration `yaml:"clusterTimeout"`
	LeaderTTL      cc.Duration `yaml:"leaderTTL"`
	// ShapeHalfLife is the half-life of the history of submitted shapes
	// that fragmentation-aware node scoring measures against. See
	// docs/design/scheduling-core.md.
	ShapeHalfLife cc.Duration `yaml:"shapeHalfLife"`
	// ClassWeights weights the fairshare ledger by accelerator class: a
	// GPU-second of a class counts its weight (default 1), so an H100
	// second can weigh more than a T4 second. See
	// docs/design/quota-and-fairshare.md.
	ClassWeights map[string]float64 `yaml:"classWeights"`
	// AfterRestore: etcd was restored from a snapshot, so the clusters may
	// run work it does not know; the hub adopts it instead of launching
	// it again. See docs/operators.md, "Backup and restore".
	AfterRestore bool `yaml:"afterRestore"`
	// WorkloadGuards has etcd check the stored revision of every
	// workload the loop rewrites. Needed only while a hub of a release
	// whose API wrote cancels into the workload still serves (a rolling
	// upgrade). See docs/design/single-writer-workloads.md.
	WorkloadGuards bool `yaml:"workloadGuards"`
	// QueueSubmits has the API store every submit QUEUED itself instead of
	// handing it to the leader's loop, which stores it with its next
	// decision. See docs/design/submit-through-the-loop.md.
	QueueSubmits bool `yaml:"queueSubmits"`
	// Window is how many workloads of each queue, in priority and
	// submit order, a scheduling cycle looks at, and how many it
	// considers in all: a backlog behind it costs a cycle nothing. See
	// docs/design/cost-per-workload.md.
	Window int `yaml:"window"`
}

// Retention bounds how long finished workloads are kept.
type Retention struct {
	TTL                 cc.Duration `yaml:"ttl"`
	MaxFinishedPerQueue int         `yaml:"maxFinishedPerQueue"`
	IdempotencyWindow   cc.Duration `yaml:"idempotencyWindow"`
}

// The values of Auth.Mode.
const (
	AuthOn   = "on"
	AuthNone = "none"
)

// Auth is how API callers are authenticated and what they may do
// globally. Per-queue access lists live with the queues, not here.
type Auth struct {
	// Mode is AuthOn (every call carries a principal) or AuthNone (a
	// fixed principal; loopback listeners only).
	Mode          string        `yaml:"mode"`
	OIDC          OIDC          `yaml:"oidc"`
	Authorization Authorization `yaml:"authorization"`
	// AdminTokenFile, when set and missing, gets a new admin API token at
	// start: a new hub's first credential.
	AdminTokenFile string `yaml:"adminTokenFile"`
}

// OIDC lists the identity providers whose ID tokens the hub accepts.
type OIDC struct {
	Issuers []OIDCIssuer `yaml:"issuers"`
}

// Defaults of an issuer's claims.
const (
	DefaultUsernameClaim = "sub"
	DefaultGroupsClaim   = "groups"
)

// OIDCIssuer is one trusted identity provider.
type OIDCIssuer struct {
	// IssuerURL must equal the tokens' "iss" claim; https (http only on
	// loopback, for tests).
	IssuerURL string `yaml:"issuerURL"`
	// Audience must be in the tokens' "aud" claim (the client id).
	Audience string `yaml:"audience"`
	// UsernameClaim and GroupsClaim name the claims read; default "sub"
	// and "groups".
	UsernameClaim string `yaml:"usernameClaim"`
	GroupsClaim   string `yaml:"groupsClaim"`
	// UsernamePrefix and GroupsPrefix are prepended to what the claims
	// hold, e.g. "corp:", so that two issuers' names never collide.
	UsernamePrefix string `yaml:"usernamePrefix"`
	GroupsPrefix   string `yaml:"groupsPrefix"`
	// CAFile is a PEM bundle that signs the issuer's certificate; empty:
	// the system's roots.
	CAFile string `yaml:"caFile"`
}

// Authorization maps groups and users to global permissions.
type Authorization struct {
	// GroupPermissions maps a group (with its prefix) to permissions.
	GroupPermissions map[string][]string `yaml:"groupPermissions"`
	// UserPermissions maps a user name (with its prefix) to permissions.
	UserPermissions map[string][]string `yaml:"userPermissions"`
}

// Audit is where the audit log goes and how long it is kept.
type Audit struct {
	// File is a path, "-" for standard output, or empty for none.
	File string `yaml:"file"`
	// Retention is how long events are kept; 0 keeps them forever.
	Retention cc.Duration `yaml:"retention"`
	// MaxEvents caps the events kept, oldest dropped first; 0: no cap.
	MaxEvents int `yaml:"maxEvents"`
}

// Logging is the hub's own log.
type Logging struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
}
