package helmtest

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	agentconfig "github.com/meridian-gpu/meridian/spoke-agent/config"
)

// TestVaultValuesBecomeAgentFlags: the vault values of the agent chart
// turn into the agent's --vault-* flags (each one the agent knows), the
// Vault CA Secret is mounted, and Kubernetes is the auth method.
func TestVaultValuesBecomeAgentFlags(t *testing.T) {
	h := needHelm(t)
	known := map[string]bool{}
	for _, f := range agentconfig.Fields {
		if f.Flag != "" {
			known["--"+f.Flag] = true
		}
	}
	for name, tc := range map[string]struct {
		vault map[string]any
		flags map[string]string // the --vault-* flags, exactly
		caVol bool
	}{
		"off": {vault: map[string]any{}, flags: map[string]string{}},
		"creds and certificate": {
			vault: map[string]any{"address": "https://vault.vault:8200", "role": "meridian-agent", "caSecret": "vault-ca",
				"natsCredsPath": "meridian/clusters/k8s-east/nats", "pkiRole": "meridian-agent", "pkiTTL": "24h"},
			flags: map[string]string{"--vault-addr": "https://vault.vault:8200", "--vault-auth": "kubernetes", "--vault-auth-mount": "kubernetes",
				"--vault-role": "meridian-agent", "--vault-ca-file": "/etc/meridian/vault-ca/ca.crt",
				"--vault-kv-mount": "secret", "--vault-nats-creds-path": "meridian/clusters/k8s-east/nats", "--vault-nats-creds-key": "creds",
				"--vault-pki-mount": "pki", "--vault-pki-role": "meridian-agent", "--vault-pki-ttl": "24h"},
			caVol: true,
		},
		"certificate only, own mounts": {
			vault: map[string]any{"address": "http://127.0.0.1:8200", "role": "r", "authMount": "k8s-east", "pkiMount": "pki_int",
				"pkiRole": "agents", "pkiCommonName": "east.agents.example"},
			flags: map[string]string{"--vault-addr": "http://127.0.0.1:8200", "--vault-auth": "kubernetes", "--vault-auth-mount": "k8s-east",
				"--vault-role": "r", "--vault-pki-mount": "pki_int", "--vault-pki-role": "agents", "--vault-pki-common-name": "east.agents.example"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			flags, dep := flagsOf(t, render(t, h, minimal(map[string]any{"vault": tc.vault})))
			got := map[string]string{}
			for k, v := range flags {
				if strings.HasPrefix(k, "--vault-") {
					if !known[k] {
						t.Errorf("meridian-agent has no flag %s", k)
					}
					got[k] = v[0]
				}
			}
			if !maps.Equal(got, tc.flags) {
				t.Errorf("vault flags = %v, want %v", got, tc.flags)
			}
			hasVol := false
			for _, v := range dep.Spec.Template.Spec.Volumes {
				if v.Name == "vault-ca" && v.Secret != nil && v.Secret.SecretName == "vault-ca" {
					hasVol = true
				}
			}
			if hasVol != tc.caVol {
				t.Errorf("vault-ca volume %v, want %v", hasVol, tc.caVol)
			}
		})
	}
}

func TestVaultBadValuesNameTheField(t *testing.T) {
	h := needHelm(t)
	on := map[string]any{"address": "https://vault:8200", "role": "r", "pkiRole": "p"}
	with := func(over map[string]any) map[string]any {
		v := maps.Clone(on)
		maps.Copy(v, over)
		return v
	}
	for name, tc := range map[string]struct {
		values map[string]any
		field  string
	}{
		"no role":                {minimal(map[string]any{"vault": with(map[string]any{"role": ""})}), "vault.role"},
		"nothing from Vault":     {minimal(map[string]any{"vault": with(map[string]any{"pkiRole": ""})}), "vault.address"},
		"role without address":   {minimal(map[string]any{"vault": map[string]any{"pkiRole": "p"}}), "vault.pkiRole"},
		"address without scheme": {minimal(map[string]any{"vault": with(map[string]any{"address": "vault:8200"})}), "address"},
		"bad TTL":                {minimal(map[string]any{"vault": with(map[string]any{"pkiTTL": "a day"})}), "pkiTTL"},
		"misspelt key":           {minimal(map[string]any{"vault": with(map[string]any{"pkiRoles": "x"})}), "pkiRoles"},
		"two NATS credentials": {minimal(map[string]any{"vault": with(map[string]any{"natsCredsPath": "p"}),
			"hub": map[string]any{"natsURL": "nats://hub:4222", "auth": map[string]any{"existingSecret": "c"}}}), "vault.natsCredsPath"},
		"two client certificates": {minimal(map[string]any{"vault": on,
			"hub": map[string]any{"natsURL": "nats://hub:4222", "tls": map[string]any{"existingSecret": "t", "clientCert": true}}}), "vault.pkiRole"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_, err := h.Template(ctx, release, releaseNS, tc.values)
			if err == nil {
				t.Fatalf("helm template accepted %v", tc.values)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatal(err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error does not name %q:\n%v", tc.field, err)
			}
		})
	}
}
