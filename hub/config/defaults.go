package config

import (
	"time"

	cc "github.com/meridian-gpu/meridian/internal/componentconfig"
)

// Defaults the hub runs with. Those that repeat a constant of hub/server
// or hub/retention are checked equal to it by cmd/meridian-hub's tests
// (this package may not import the server).
const (
	DefaultDataDir           = "meridian-data"
	DefaultGRPCAddr          = "127.0.0.1:7070"
	DefaultHTTPAddr          = "127.0.0.1:8080"
	DefaultMaxRequestBytes   = 2 << 20
	DefaultEmbeddedNATSPort  = 4222
	DefaultStreamReplicas    = 1
	MaxStreamReplicas        = 5
	DefaultGCPercent         = 400
	DefaultSchedulePeriod    = time.Second
	DefaultClusterTimeout    = 15 * time.Second
	DefaultLeaderTTL         = 5 * time.Second
	DefaultShapeHalfLife     = 2 * time.Hour
	DefaultScheduleWindow    = 2048
	DefaultRetentionTTL      = 7 * 24 * time.Hour
	DefaultMaxPerQueue       = 10_000
	DefaultIdempotencyWindow = 24 * time.Hour
	MinIdempotencyWindow     = time.Minute
	MinMaxRequestBytes       = 4096
	DefaultAuditRetention    = 30 * 24 * time.Hour
	DefaultAuditMaxEvents    = 1_000_000
)

// Default returns a configuration holding every default: what a hub runs
// with given no file, no variable and no flag.
func Default() *HubConfiguration {
	return &HubConfiguration{
		APIVersion: APIVersion,
		Kind:       Kind,
		DataDir:    DefaultDataDir,
		GCPercent:  DefaultGCPercent,
		API: API{
			GRPCAddr:        DefaultGRPCAddr,
			HTTPAddr:        DefaultHTTPAddr,
			MaxRequestBytes: DefaultMaxRequestBytes,
		},
		Etcd: Etcd{Endpoints: []string{}},
		NATS: NATS{EmbeddedPort: DefaultEmbeddedNATSPort, StreamReplicas: DefaultStreamReplicas},
		Scheduling: Scheduling{
			Period:         cc.Duration(DefaultSchedulePeriod),
			ClusterTimeout: cc.Duration(DefaultClusterTimeout),
			LeaderTTL:      cc.Duration(DefaultLeaderTTL),
			ShapeHalfLife:  cc.Duration(DefaultShapeHalfLife),
			Window:         DefaultScheduleWindow,
			ClassWeights:   map[string]float64{},
		},
		Retention: Retention{
			TTL:                 cc.Duration(DefaultRetentionTTL),
			MaxFinishedPerQueue: DefaultMaxPerQueue,
			IdempotencyWindow:   cc.Duration(DefaultIdempotencyWindow),
		},
		Auth: Auth{
			Mode: AuthOn,
			OIDC: OIDC{Issuers: []OIDCIssuer{}},
			Authorization: Authorization{
				GroupPermissions: map[string][]string{},
				UserPermissions:  map[string][]string{},
			},
		},
		Audit:   Audit{Retention: cc.Duration(DefaultAuditRetention), MaxEvents: DefaultAuditMaxEvents},
		Logging: Logging{Level: "info", Format: "text"},
		Vault:   Vault{PKIMount: "pki", KVMount: "secret", PKIAltNames: []string{}, PKIIPSANs: []string{}},
	}
}

// Complete fills the defaults that depend on what was loaded: those of
// each OIDC issuer.
func Complete(c *HubConfiguration) {
	for i := range c.Auth.OIDC.Issuers {
		is := &c.Auth.OIDC.Issuers[i]
		if is.UsernameClaim == "" {
			is.UsernameClaim = DefaultUsernameClaim
		}
		if is.GroupsClaim == "" {
			is.GroupsClaim = DefaultGroupsClaim
		}
	}
}
