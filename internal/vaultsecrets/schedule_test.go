package vaultsecrets

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestRenewAt(t *testing.T) {
	tests := map[string]struct {
		from, to time.Time
		want     time.Time
	}{
		"30s certificate": {t0, t0.Add(30 * time.Second), t0.Add(20 * time.Second)},
		"one hour":        {t0, t0.Add(time.Hour), t0.Add(40 * time.Minute)},
		"already expired": {t0, t0, t0},
		"backwards":       {t0, t0.Add(-time.Second), t0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := RenewAt(tc.from, tc.to); !got.Equal(tc.want) {
				t.Fatalf("RenewAt = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	b := Backoff{Base: time.Second, Max: 10 * time.Second}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := b.Delay(i); got != w {
			t.Errorf("Delay(%d) = %s, want %s", i, got, w)
		}
	}
	if got := (Backoff{}).Delay(0); got != DefaultBackoff.Base {
		t.Errorf("zero Backoff: %s, want the default base", got)
	}
	if got := b.Delay(1000); got != b.Max {
		t.Errorf("Delay(1000) = %s, want the cap", got)
	}
}

func TestRetryDelayBeforeExpiry(t *testing.T) {
	b := Backoff{Base: time.Second, Max: time.Minute}
	tests := map[string]struct {
		attempt int
		expiry  time.Time
		want    time.Duration
	}{
		"no expiry: plain backoff":            {6, time.Time{}, time.Minute},
		"far expiry: plain backoff":           {2, t0.Add(time.Hour), 4 * time.Second},
		"near expiry: halfway to it":          {6, t0.Add(20 * time.Second), 10 * time.Second},
		"expired: still waits the base":       {6, t0.Add(-time.Second), time.Second},
		"very near expiry: at least the base": {0, t0.Add(time.Second), time.Second},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := b.RetryDelay(tc.attempt, t0, tc.expiry); got != tc.want {
				t.Fatalf("RetryDelay = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestConfigValidateNamesFlags(t *testing.T) {
	tests := map[string]struct {
		cfg  Config
		want []string // "" = valid
	}{
		"token":              {Config{Addr: "http://127.0.0.1:8200", Auth: AuthToken, TokenFile: "/t"}, nil},
		"approle":            {Config{Addr: "https://vault:8200", Auth: AuthAppRole, RoleIDFile: "/r", SecretIDFile: "/s"}, nil},
		"kubernetes":         {Config{Addr: "https://vault:8200", Auth: AuthKubernetes, Role: "agent"}, nil},
		"no address":         {Config{Auth: AuthToken, TokenFile: "/t"}, []string{"--vault-addr: required"}},
		"bad address":        {Config{Addr: "vault:8200", Auth: AuthToken, TokenFile: "/t"}, []string{"--vault-addr: want http(s)"}},
		"no auth":            {Config{Addr: "http://v:1"}, []string{"--vault-auth: required"}},
		"unknown auth":       {Config{Addr: "http://v:1", Auth: "ldap"}, []string{`--vault-auth: want token, approle or kubernetes (got "ldap")`}},
		"token no file":      {Config{Addr: "http://v:1", Auth: AuthToken}, []string{"--vault-token-file: required"}},
		"approle no files":   {Config{Addr: "http://v:1", Auth: AuthAppRole}, []string{"--vault-approle-role-id-file", "--vault-approle-secret-id-file"}},
		"kubernetes no role": {Config{Addr: "http://v:1", Auth: AuthKubernetes}, []string{"--vault-role: required"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.want) == 0 {
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
	if err := (&PKIConfig{}).Validate(); err == nil || !strings.Contains(err.Error(), "--vault-pki-role") || !strings.Contains(err.Error(), "--vault-pki-common-name") {
		t.Errorf("empty PKI config: %v", err)
	}
}

func TestCredsExpiry(t *testing.T) {
	// header.{"exp":1767225600}.sig, decorated as nsc writes it.
	creds := "-----BEGIN NATS USER JWT-----\neyJhbGciOiJlZDI1NTE5In0.eyJleHAiOjE3NjcyMjU2MDB9.c2ln\n------END NATS USER JWT------\n"
	at, ok := credsExpiry(creds)
	if !ok || !at.Equal(time.Unix(1767225600, 0)) {
		t.Fatalf("credsExpiry = %s %v", at, ok)
	}
	if _, ok := credsExpiry("not creds"); ok {
		t.Fatal("expiry found in garbage")
	}
}
