package vaultsecrets

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/meridian-gpu/meridian/internal/ctxtime"
)

// DefaultKVRefresh is how often a KV secret is read again.
const DefaultKVRefresh = 5 * time.Minute

// KVSecret is one KV v2 secret, read once by Fetch and again every
// refresh period by Run. Between reads, and while Vault is unreachable,
// the last good value is served.
type KVSecret struct {
	m                 *Manager
	name, mount, path string
	refresh           time.Duration
	expiryOf          func(map[string]any) (time.Time, bool)
	mu                sync.Mutex
	data              map[string]any
	version           int
	onChange          []func()
}

// NewKVSecret describes the secret at <mount>/data/<path>; name labels it
// in metrics, logs and readiness (e.g. "nats-creds"). refresh <= 0 means
// DefaultKVRefresh.
func (m *Manager) NewKVSecret(name, mount, path string, refresh time.Duration) *KVSecret {
	if refresh <= 0 {
		refresh = DefaultKVRefresh
	}
	return &KVSecret{m: m, name: name, mount: strings.Trim(mount, "/"), path: strings.Trim(path, "/"), refresh: refresh}
}

// WithExpiry sets how to tell when the secret's value expires (e.g. the
// exp claim of a NATS user JWT); it shows in metrics and readiness.
func (s *KVSecret) WithExpiry(f func(map[string]any) (time.Time, bool)) *KVSecret {
	s.expiryOf = f
	return s
}

// OnChange adds a hook run (in Run's goroutine) after a read that found a
// new version.
func (s *KVSecret) OnChange(f func()) { s.mu.Lock(); s.onChange = append(s.onChange, f); s.mu.Unlock() }

// Fetch reads the secret now. Errors name mount and path, never a value.
func (s *KVSecret) Fetch(ctx context.Context) error {
	kv, err := s.m.api.KVv2(s.mount).Get(ctx, s.path)
	if err != nil {
		err = fmt.Errorf("vault KV %s/%s (%s): %w", s.mount, s.path, s.name, err)
		s.m.fail("kv", err)
		return err
	}
	s.m.ok()
	version := 0
	if kv.VersionMetadata != nil {
		version = kv.VersionMetadata.Version
	}
	s.mu.Lock()
	changed := version != s.version || s.data == nil
	s.data, s.version = kv.Data, version
	hooks := append([]func(){}, s.onChange...)
	s.mu.Unlock()
	if s.expiryOf != nil {
		if at, ok := s.expiryOf(kv.Data); ok {
			s.m.setExpiry(s.name, at)
		}
	}
	s.m.met.renews.WithLabelValues(s.name).Inc()
	if changed {
		s.m.log.Info("read secret from Vault KV", "secret", s.name, "mount", s.mount, "path", s.path, "version", version)
		for _, h := range hooks {
			h()
		}
	}
	return nil
}

// Run reads the secret again every refresh period until ctx ends; a
// failed read is retried with backoff and the held value kept.
func (s *KVSecret) Run(ctx context.Context) {
	wait := s.refresh
	attempt := 0
	for ctxtime.Sleep(ctx, wait) {
		if err := s.Fetch(ctx); err != nil {
			wait = s.m.backoff.Delay(attempt)
			attempt++
			continue
		}
		wait, attempt = s.refresh, 0
	}
}

// Data is a copy of the held value (nil before the first Fetch).
func (s *KVSecret) Data() map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data == nil {
		return nil
	}
	return maps.Clone(s.data)
}

// Version is the KV version of the held value.
func (s *KVSecret) Version() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// String returns the held value's key as a string. Errors name the
// secret's path and key, never a value.
func (s *KVSecret) String(key string) (string, error) {
	s.mu.Lock()
	v, ok := s.data[key]
	s.mu.Unlock()
	if !ok {
		return "", fmt.Errorf("vault KV %s/%s has no key %q", s.mount, s.path, key)
	}
	str, ok := v.(string)
	if !ok || str == "" {
		return "", fmt.Errorf("vault KV %s/%s: key %q is not a non-empty string", s.mount, s.path, key)
	}
	return str, nil
}

// BytesFunc returns a func serving the held value's key (its string, or
// base64 decoded when key ends in "_b64"); natsbus.WithCredsFunc takes it.
func (s *KVSecret) BytesFunc(key string) func() ([]byte, error) {
	return func() ([]byte, error) {
		str, err := s.String(key)
		if err != nil {
			return nil, err
		}
		if strings.HasSuffix(key, "_b64") {
			return base64.StdEncoding.DecodeString(str)
		}
		return []byte(str), nil
	}
}

// NATSCredsExpiry returns an expiry func for WithExpiry: the exp claim of
// the user JWT in the NATS credentials held under key.
func NATSCredsExpiry(key string) func(map[string]any) (time.Time, bool) {
	return func(d map[string]any) (time.Time, bool) {
		str, _ := d[key].(string)
		return credsExpiry(str)
	}
}

// credsExpiry reads the exp claim of the first JWT in decorated NATS
// credentials.
func credsExpiry(creds string) (time.Time, bool) {
	for _, line := range strings.Split(creds, "\n") {
		line = strings.TrimSpace(line)
		parts := strings.Split(line, ".")
		if len(parts) != 3 || strings.HasPrefix(line, "-") {
			continue
		}
		raw, err := base64.RawURLEncoding.DecodeString(parts[1])
		if err != nil {
			continue
		}
		var c struct {
			Exp int64 `json:"exp"`
		}
		if json.Unmarshal(raw, &c) != nil || c.Exp == 0 {
			return time.Time{}, false
		}
		return time.Unix(c.Exp, 0), true
	}
	return time.Time{}, false
}
