package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-gpu/meridian/internal/vaultsecrets"
	agentconfig "github.com/meridian-gpu/meridian/spoke-agent/config"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// vaultSecrets are the agent's NATS secrets from Vault: the logged-in
// manager, the KV credentials and the PKI client certificate (either may
// be nil), and the NATS options that serve them.
type vaultSecrets struct {
	m        *vaultsecrets.Manager
	creds    *vaultsecrets.KVSecret
	cert     *vaultsecrets.CertSource
	natsOpts []natsbus.Option
	bus      atomic.Pointer[natsbus.Bus]
}

// vaultConfig turns the vault section into the package's Config.
func vaultConfig(v agentconfig.Vault) vaultsecrets.Config {
	return vaultsecrets.Config{Addr: v.Addr, CAFile: v.CAFile, Auth: v.Auth, AuthMount: v.AuthMount, Role: v.Role,
		TokenFile: v.TokenFile, RoleIDFile: v.AppRoleRoleIDFile, SecretIDFile: v.AppRoleSecretIDFile, K8sTokenFile: v.KubernetesTokenFile}
}

// startVault logs in and gets the first secrets: any failure is a
// startup error naming the setting. After it, Vault being down is never
// fatal (run keeps the held secrets and retries).
func startVault(ctx context.Context, c *agentconfig.AgentConfiguration, log *slog.Logger, reg prometheus.Registerer) (*vaultSecrets, error) {
	v := c.Vault
	m, err := vaultsecrets.New(ctx, vaultConfig(v), vaultsecrets.WithLogger(log.With("part", "vault")), vaultsecrets.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("vault: %w", err)
	}
	vs := &vaultSecrets{m: m}
	if v.NATSCredsPath != "" {
		vs.creds = m.NewKVSecret("nats-creds", v.KVMount, v.NATSCredsPath, v.KVRefresh.D()).WithExpiry(vaultsecrets.NATSCredsExpiry(v.NATSCredsKey))
		if err := vs.creds.Fetch(ctx); err != nil {
			return nil, fmt.Errorf("vault.natsCredsPath (--vault-nats-creds-path): %w", err)
		}
		// The natsbus option checks the credentials' shape before dialling.
		vs.natsOpts = append(vs.natsOpts, natsbus.WithCredsFunc(vs.creds.BytesFunc(v.NATSCredsKey)))
	}
	if v.PKIRole != "" {
		cn := v.PKICommonName
		if cn == "" {
			cn = c.ClusterID + ".agents.meridian"
		}
		vs.cert, err = m.NewCertSource(vaultsecrets.PKIConfig{Name: "nats-client-cert", Mount: v.PKIMount, Role: v.PKIRole, CommonName: cn, TTL: v.PKITTL.D()})
		if err != nil {
			return nil, err
		}
		if err := vs.cert.Fetch(ctx); err != nil {
			return nil, fmt.Errorf("vault.pkiRole (--vault-pki-role): %w", err)
		}
		// Reconnect with the renewed certificate; running work and
		// unacknowledged dispatches are untouched (a redelivered dispatch
		// is launched once: the agent is idempotent by dispatch id).
		vs.cert.OnRotate(func(*tls.Certificate) {
			if b := vs.bus.Load(); b != nil {
				if err := b.Conn().ForceReconnect(); err != nil {
					log.Warn("reconnect to NATS with the renewed certificate", "err", err)
				} else {
					log.Info("reconnecting to NATS with the renewed client certificate")
				}
			}
		})
		vs.natsOpts = append(vs.natsOpts, natsbus.WithClientCertificateFunc(c.NATS.TLS.CAFile, vs.cert.GetClientCertificate))
	}
	return vs, nil
}

// run keeps the token and the secrets fresh until ctx ends.
func (vs *vaultSecrets) run(ctx context.Context, bus *natsbus.Bus) {
	vs.bus.Store(bus)
	go vs.m.Run(ctx)
	if vs.creds != nil {
		go vs.creds.Run(ctx)
	}
	if vs.cert != nil {
		go vs.cert.Run(ctx)
	}
}

// readyz answers 200 while the held secrets are valid (Vault being down
// is in the detail, not a failure), 503 once one has expired.
func readyz(vs *vaultSecrets) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if vs == nil {
			_, _ = fmt.Fprintln(w, "ok")
			return
		}
		ready, detail := vs.m.Readiness()
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintln(w, "not ready: "+detail)
			return
		}
		_, _ = fmt.Fprintln(w, "ok: "+detail)
	})
}
