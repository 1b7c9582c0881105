package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-gpu/meridian/hub/server"
	"github.com/meridian-gpu/meridian/internal/vaultsecrets"
)

// startVault, with vault.addr set, logs in to Vault, has the API's
// serving certificate signed by its PKI engine (key made here) and keeps
// it renewed, and reads the external etcd's client credentials from KV.
// The server reads certificates through reloading files, so they are
// written to a private directory (0700, files 0600) that stop removes;
// the etcd password stays in memory. A failed login or first
// certificate is a startup error naming the setting; later, Vault being
// down only logs and retries (the held certificate is served until it
// expires).
func startVault(ctx context.Context, o *options, log *slog.Logger) (stop func(), err error) {
	v := o.conf.Vault
	if v.Addr == "" {
		return func() {}, nil
	}
	log = log.With("component", "vault")
	reg := prometheus.NewRegistry()
	m, err := vaultsecrets.New(ctx, vaultsecrets.Config{Addr: v.Addr, CAFile: v.CAFile, Auth: v.Auth, AuthMount: v.AuthMount, Role: v.Role,
		TokenFile: v.TokenFile, RoleIDFile: v.AppRoleRoleIDFile, SecretIDFile: v.AppRoleSecretIDFile, K8sTokenFile: v.KubernetesTokenFile},
		vaultsecrets.WithLogger(log), vaultsecrets.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("vault: %w", err)
	}
	// /metrics serves meridian_vault_*, /readyz says how Vault is.
	o.cfg.Secrets = vaultState{m: m, reg: reg}
	dir, err := os.MkdirTemp("", "meridian-hub-vault-")
	if err != nil {
		return nil, fmt.Errorf("vault: private directory: %w", err)
	}
	fail := func(err error) (func(), error) { os.RemoveAll(dir); return nil, err }
	var runs []func(context.Context)
	if v.PKIRole != "" {
		src, err := m.NewCertSource(vaultsecrets.PKIConfig{Name: "api-serving-cert", Mount: v.PKIMount, Role: v.PKIRole,
			CommonName: v.PKICommonName, AltNames: v.PKIAltNames, IPSANs: v.PKIIPSANs, TTL: v.PKITTL.D()})
		if err != nil {
			return fail(err)
		}
		if err := src.Fetch(ctx); err != nil {
			return fail(fmt.Errorf("vault.pkiRole (--vault-pki-role): %w", err))
		}
		certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
		if err := writePair(src.Certificate(), certFile, keyFile); err != nil {
			return fail(fmt.Errorf("vault: %w", err))
		}
		src.OnRotate(func(c *tls.Certificate) {
			if err := writePair(c, certFile, keyFile); err != nil {
				log.Error("cannot write the renewed API serving certificate; the previous one is served", "err", err)
			}
		})
		o.cfg.Security.TLS.CertFile, o.cfg.Security.TLS.KeyFile = certFile, keyFile
		runs = append(runs, src.Run)
	}
	if v.EtcdPath != "" {
		kv := m.NewKVSecret("etcd-credentials", v.KVMount, v.EtcdPath, 0)
		if err := kv.Fetch(ctx); err != nil {
			return fail(fmt.Errorf("vault.etcdPath (--vault-etcd-path): %w", err))
		}
		if err := etcdFromKV(kv, dir, &o.cfg.EtcdClient); err != nil {
			return fail(fmt.Errorf("vault.etcdPath (--vault-etcd-path): %w", err))
		}
		// A new client certificate is read at the next etcd connection
		// (the server reloads the files); a new password or user needs a
		// restart of the replica, as with files.
		first := o.cfg.EtcdClient
		kv.OnChange(func() {
			var now = first
			if err := etcdFromKV(kv, dir, &now); err != nil {
				log.Error("cannot use the new etcd credentials from Vault; keeping the current ones", "err", err)
				return
			}
			if now.Username != first.Username || now.Password != first.Password {
				log.Warn("the etcd user or password in Vault changed: restart this replica to use it")
			}
		})
		runs = append(runs, kv.Run)
	}
	rctx, cancel := context.WithCancel(ctx)
	go m.Run(rctx)
	for _, r := range runs {
		go r(rctx)
	}
	return func() { cancel(); os.RemoveAll(dir) }, nil
}

// writePair writes c's chain and key as PEM, each by rename so a reader
// never sees half a file.
func writePair(c *tls.Certificate, certFile, keyFile string) error {
	der, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		return fmt.Errorf("encode the key: %w", err)
	}
	var chain []byte
	for _, b := range c.Certificate {
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: b})...)
	}
	if err := writeAtomic(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})); err != nil {
		return err
	}
	return writeAtomic(certFile, chain)
}

func writeAtomic(path string, b []byte) error {
	tmp := path + ".new"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// etcdFromKV sets e from the KV secret: username and password in memory,
// the PEM ca, cert and key (when present) as files in dir.
func etcdFromKV(kv *vaultsecrets.KVSecret, dir string, e *server.EtcdClient) error {
	d := kv.Data()
	str := func(k string) string { s, _ := d[k].(string); return s }
	if u := str("username"); u != "" {
		if str("password") == "" {
			return errors.New("key username without key password")
		}
		e.Username, e.Password = u, str("password")
	}
	if (str("cert") == "") != (str("key") == "") {
		return errors.New("give keys cert and key together")
	}
	for _, f := range []struct {
		key  string
		dest *string
	}{{"ca", &e.CAFile}, {"cert", &e.CertFile}, {"key", &e.KeyFile}} {
		if str(f.key) == "" {
			continue
		}
		p := filepath.Join(dir, "etcd-"+f.key+".pem")
		if err := writeAtomic(p, []byte(str(f.key))); err != nil {
			return err
		}
		*f.dest = p
	}
	if e.Username == "" && e.CertFile == "" {
		return errors.New("no credential in it: want keys username and password, or cert and key")
	}
	return nil
}

// vaultState reports the Vault secrets to the server (server.SecretsSource).
type vaultState struct {
	m   *vaultsecrets.Manager
	reg *prometheus.Registry
}

func (v vaultState) Readiness() (bool, string)     { return v.m.Readiness() }
func (v vaultState) Gatherer() prometheus.Gatherer { return v.reg }
