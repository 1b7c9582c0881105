package config

import (
	"strings"
	"testing"
)

func TestVaultSettingsValidation(t *testing.T) {
	tests := map[string]struct {
		body string
		want []string // nil: valid
	}{
		"off":                   {"", nil},
		"approle + both":        {"vault: {addr: \"https://vault:8200\", auth: approle, appRoleRoleIDFile: /r, appRoleSecretIDFile: /s, natsCredsPath: meridian/clusters/c1/nats, pkiRole: meridian-agent}\n", nil},
		"kubernetes creds only": {"vault: {addr: \"https://vault:8200\", auth: kubernetes, role: meridian-agent, natsCredsPath: p}\n", nil},
		"token pki only":        {"vault: {addr: \"http://127.0.0.1:8200\", auth: token, tokenFile: /t, pkiRole: r}\n", nil},
		"role without addr":     {"vault: {pkiRole: r}\n", []string{"vault.pkiRole: needs vault.addr"}},
		"no auth":               {"vault: {addr: \"https://v:1\", pkiRole: r}\n", []string{"vault.auth: required"}},
		"approle without files": {"vault: {addr: \"https://v:1\", auth: approle, pkiRole: r}\n", []string{"vault.appRoleRoleIDFile", "vault.appRoleSecretIDFile"}},
		"kubernetes no role":    {"vault: {addr: \"https://v:1\", auth: kubernetes, pkiRole: r}\n", []string{"vault.role: required"}},
		"nothing from vault":    {"vault: {addr: \"https://v:1\", auth: token, tokenFile: /t}\n", []string{"nothing comes from Vault"}},
		"bad addr":              {"vault: {addr: \"vault:8200\", auth: token, tokenFile: /t, pkiRole: r}\n", []string{"vault.addr: want http(s)"}},
		"two credentials": {"nats: {url: \"nats://hub:4222\", credsFile: /c}\nvault: {addr: \"https://v:1\", auth: token, tokenFile: /t, natsCredsPath: p}\n",
			[]string{"vault.natsCredsPath: the NATS credential comes from Vault"}},
		"two certificates": {"nats: {url: \"nats://hub:4222\", tls: {certFile: /c, keyFile: /k}}\nvault: {addr: \"https://v:1\", auth: token, tokenFile: /t, pkiRole: r}\n",
			[]string{"vault.pkiRole: the NATS client certificate comes from Vault"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			body := "apiVersion: meridian.io/v1alpha1\nkind: AgentConfiguration\nclusterID: c1\nsimcluster: {example: small}\n" + tc.body
			if !strings.Contains(tc.body, "nats:") {
				body += "nats: {url: \"nats://hub:4222\"}\n"
			}
			_, err := NewSchema().Parse("agent.yaml", []byte(body))
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("valid; want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
