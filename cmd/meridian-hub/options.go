package main

import (
	"log/slog"

	hubconfig "github.com/meridian-gpu/meridian/hub/config"
	"github.com/meridian-gpu/meridian/hub/server"
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
// before start). The auth, api.tls and audit sections have no
// server.Config field yet: they stay in conf until the server takes them.
func newOptions(c *hubconfig.HubConfiguration) (*options, error) {
	o := &options{conf: c}
	_ = o.logLevel.UnmarshalText([]byte(c.Logging.Level)) // validated
	o.cfg = server.Config{
		DataDir:           c.DataDir,
		EtcdEndpoints:     c.Etcd.Endpoints,
		EtcdMaxTxnOps:     c.Etcd.MaxTxnOps,
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
	return o, nil
}

func natsAuthFlags(n hubconfig.NATS) *natsbus.AuthFlags {
	return &natsbus.AuthFlags{
		CredsFile: n.CredsFile, NKeyFile: n.NKeyFile, User: n.User, PasswordFile: n.PasswordFile, TokenFile: n.TokenFile,
		TLSCA: n.TLS.CAFile, TLSCert: n.TLS.CertFile, TLSKey: n.TLS.KeyFile,
	}
}
