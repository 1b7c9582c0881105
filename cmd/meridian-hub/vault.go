package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/meridian-gpu/meridian/internal/vaultsecrets"
)

// startVault, with vault.addr set, logs in to Vault, has the API's
// serving certificate signed by its PKI engine (key made here) and keeps
// it renewed. The server reads the certificate through its reloading TLS
// files (internal/tlsreload), so the pair is written to a private
// directory (0700, files 0600) that stop removes. A failed login or first
// certificate is a startup error naming the setting; later, Vault being
// down only logs and retries (the held certificate is served until it
// expires).
func startVault(ctx context.Context, o *options, log *slog.Logger) (stop func(), err error) {
	v := o.conf.Vault
	if v.Addr == "" {
		return func() {}, nil
	}
	log = log.With("component", "vault")
	m, err := vaultsecrets.New(ctx, vaultsecrets.Config{Addr: v.Addr, CAFile: v.CAFile, Auth: v.Auth, AuthMount: v.AuthMount, Role: v.Role,
		TokenFile: v.TokenFile, RoleIDFile: v.AppRoleRoleIDFile, SecretIDFile: v.AppRoleSecretIDFile, K8sTokenFile: v.KubernetesTokenFile},
		vaultsecrets.WithLogger(log))
	if err != nil {
		return nil, fmt.Errorf("vault: %w", err)
	}
	src, err := m.NewCertSource(vaultsecrets.PKIConfig{Name: "api-serving-cert", Mount: v.PKIMount, Role: v.PKIRole,
		CommonName: v.PKICommonName, AltNames: v.PKIAltNames, IPSANs: v.PKIIPSANs, TTL: v.PKITTL.D()})
	if err != nil {
		return nil, err
	}
	if err := src.Fetch(ctx); err != nil {
		return nil, fmt.Errorf("vault.pkiRole (--vault-pki-role): %w", err)
	}
	dir, err := os.MkdirTemp("", "meridian-hub-tls-")
	if err != nil {
		return nil, fmt.Errorf("vault: directory for the serving certificate: %w", err)
	}
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := writePair(src.Certificate(), certFile, keyFile); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("vault: %w", err)
	}
	src.OnRotate(func(c *tls.Certificate) {
		if err := writePair(c, certFile, keyFile); err != nil {
			log.Error("cannot write the renewed API serving certificate; the previous one is served", "err", err)
		}
	})
	o.cfg.Security.TLS.CertFile, o.cfg.Security.TLS.KeyFile = certFile, keyFile
	rctx, cancel := context.WithCancel(ctx)
	go m.Run(rctx)
	go src.Run(rctx)
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
