package main

import (
	"log/slog"
	"math"
	"time"

	"github.com/meridian-gpu/meridian/hub/auth"
	"github.com/meridian-gpu/meridian/hub/authz"
	hubconfig "github.com/meridian-gpu/meridian/hub/config"
	"github.com/meridian-gpu/meridian/hub/server"
	"github.com/meridian-gpu/meridian/internal/tlsreload"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// options are a loaded configuration turned into what the hub runs with.
type options struct {
	conf     *hubconfig.HubConfiguration
	cfg      server.Config
	logLevel slog.Level
}

// newOptions maps the configuration onto server.Config and checks the
// NATS credential and TLS files (the only settings whose files are read
// before start). The auth, api.tls and audit sections become
// server.Config.Security.
func newOptions(c *hubconfig.HubConfiguration) (*options, error) {
	o := &options{conf: c}
	_ = o.logLevel.UnmarshalText([]byte(c.Logging.Level)) // validated
	o.cfg = server.Config{
		DataDir:       c.DataDir,
		EtcdEndpoints: c.Etcd.Endpoints,
		EtcdMaxTxnOps: c.Etcd.MaxTxnOps,
		EtcdClient: server.EtcdClient{
			CAFile: c.Etcd.TLS.CAFile, CertFile: c.Etcd.TLS.CertFile, KeyFile: c.Etcd.TLS.KeyFile,
			Username: c.Etcd.Username, Password: c.Etcd.Password, PasswordFile: c.Etcd.PasswordFile,
		},
		NATSURL:           c.NATS.URL,
		EmbeddedNATSPort:  c.NATS.EmbeddedPort,
		EmbeddedEtcdPort:  c.Etcd.EmbeddedPort,
		GRPCAddr:          c.API.GRPCAddr,
		HTTPAddr:          c.API.HTTPAddr,
		HubID:             c.HubID,
		SchedulePeriod:    c.Scheduling.Period.D(),
		ClusterTimeout:    c.Scheduling.ClusterTimeout.D(),
		LeaderTTL:         c.Scheduling.LeaderTTL.D(),
		MaxRequestBytes:   c.API.MaxRequestBytes,
		NoScheduler:       c.Scheduling.Disabled,
		RetentionTTL:      c.Retention.TTL.D(),
		RetentionPerQueue: c.Retention.MaxFinishedPerQueue,
		IdempotencyWindow: c.Retention.IdempotencyWindow.D(),
		Version:           version,
	}
	o.cfg.Dispatch.ClassWeights = c.Scheduling.ClassWeights
	o.cfg.Dispatch.ShapeHalfLife = c.Scheduling.ShapeHalfLife.D()
	o.cfg.Dispatch.Scheduler.MaxConsidered = c.Scheduling.Window
	o.cfg.Dispatch.AfterRestore = c.Scheduling.AfterRestore
	o.cfg.Dispatch.WorkloadGuards = c.Scheduling.WorkloadGuards
	o.cfg.Dispatch.QueueSubmits = c.Scheduling.QueueSubmits
	o.cfg.Security = security(c)
	if len(o.cfg.EtcdEndpoints) == 0 {
		o.cfg.EtcdEndpoints = nil
	}
	if c.NATS.AnyCredential() {
		// natsbus reads the password and the token from the environment
		// itself, the only place a secret may come from.
		opts, err := natsAuthFlags(c.NATS).Options(c.NATS.URL)
		if err != nil {
			return nil, err
		}
		o.cfg.NATSOptions = opts
	}
	// Always given, so a hub sets the streams to its configured count
	// (an agent's bus keeps whatever the streams have).
	o.cfg.NATSOptions = append(o.cfg.NATSOptions, natsbus.WithStreamReplicas(c.NATS.StreamReplicas))
	if sa := c.NATS.SpokeAuth; sa.Enabled {
		o.cfg.SpokeAuth = &server.SpokeAuth{OperatorSigningKeyFile: sa.OperatorSigningKeyFile, SystemCredsFile: sa.SystemCredsFile}
	}
	return o, nil
}

func natsAuthFlags(n hubconfig.NATS) *natsbus.AuthFlags {
	return &natsbus.AuthFlags{
		CredsFile: n.CredsFile, NKeyFile: n.NKeyFile, User: n.User, PasswordFile: n.PasswordFile, TokenFile: n.TokenFile,
		TLSCA: n.TLS.CAFile, TLSCert: n.TLS.CertFile, TLSKey: n.TLS.KeyFile,
	}
}

// security maps the auth, api.tls and audit sections onto the server's.
func security(c *hubconfig.HubConfiguration) server.Security {
	sec := server.Security{
		Mode: c.Auth.Mode,
		Authorization: authz.Config{
			GroupPermissions: c.Auth.Authorization.GroupPermissions,
			UserPermissions:  c.Auth.Authorization.UserPermissions,
		},
		TLS:                      tlsreload.Files{CertFile: c.API.TLS.CertFile, KeyFile: c.API.TLS.KeyFile, ClientCAFile: c.API.TLS.ClientCAFile},
		AllowInsecureNonLoopback: c.API.AllowInsecureNonLoopback,
		AuditFile:                c.Audit.File,
		AuditMaxAge:              c.Audit.Retention.D(),
		AuditMaxEvents:           c.Audit.MaxEvents,
		AdminTokenFile:           c.Auth.AdminTokenFile,
	}
	// 0 means "no limit" in the configuration file.
	if sec.AuditMaxAge == 0 {
		sec.AuditMaxAge = 100 * 365 * 24 * time.Hour
	}
	if sec.AuditMaxEvents == 0 {
		sec.AuditMaxEvents = math.MaxInt
	}
	for _, is := range c.Auth.OIDC.Issuers {
		sec.OIDC = append(sec.OIDC, auth.IssuerConfig{IssuerURL: is.IssuerURL, Audience: is.Audience,
			UsernameClaim: is.UsernameClaim, GroupsClaim: is.GroupsClaim,
			UsernamePrefix: is.UsernamePrefix, GroupsPrefix: is.GroupsPrefix, CAFile: is.CAFile})
	}
	return sec
}
