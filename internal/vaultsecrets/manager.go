package vaultsecrets

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/vault/api"
	"github.com/hashicorp/vault/api/auth/approle"
	k8sauth "github.com/hashicorp/vault/api/auth/kubernetes"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-gpu/meridian/internal/credfile"
	"github.com/meridian-gpu/meridian/internal/ctxtime"
)

// Manager is a logged-in Vault client that keeps its token alive and
// tracks whether Vault answers. It is safe for concurrent use.
type Manager struct {
	cfg     Config
	api     *api.Client
	log     *slog.Logger
	now     func() time.Time
	backoff Backoff
	met     *metrics

	reauth chan struct{}
	logins atomic.Int64

	mu        sync.Mutex
	auth      *api.Secret // the last login's answer
	loginAt   time.Time
	up        bool
	downSince time.Time
	lastOp    string
	lastErr   string
	expiries  map[string]time.Time // secret name -> when the held value expires
}

// Option adjusts a Manager.
type Option func(*Manager)

// WithLogger sets where warnings (Vault unreachable) and renewals are
// logged.
func WithLogger(l *slog.Logger) Option { return func(m *Manager) { m.log = l } }

// WithRegisterer registers the meridian_vault_* metrics on r; without it
// they go to a private registry.
func WithRegisterer(r prometheus.Registerer) Option {
	return func(m *Manager) { m.met = newMetrics(r) }
}

// WithClock replaces time.Now (readiness and expiry decisions in tests).
func WithClock(now func() time.Time) Option { return func(m *Manager) { m.now = now } }

// New checks cfg, builds the client and logs in once. A failure is a
// startup error that names the flag at fault.
func New(ctx context.Context, cfg Config, opts ...Option) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Manager{cfg: cfg, log: slog.New(slog.DiscardHandler), now: time.Now, backoff: cfg.Backoff,
		reauth: make(chan struct{}, 1), expiries: map[string]time.Time{}}
	if m.backoff.Base <= 0 {
		m.backoff = DefaultBackoff
	}
	for _, o := range opts {
		o(m)
	}
	if m.met == nil {
		m.met = newMetrics(prometheus.NewRegistry())
	}
	vc := api.DefaultConfig()
	if vc.Error != nil {
		return nil, fmt.Errorf("vault client: %w", vc.Error)
	}
	vc.Address = cfg.Addr
	vc.MaxRetries = 0 // this package retries, with its own backoff
	vc.Timeout = cfg.RequestTimeout
	if vc.Timeout == 0 {
		vc.Timeout = 30 * time.Second
	}
	if cfg.CAFile != "" {
		if _, err := credfile.Read(cfg.CAFile); err != nil {
			return nil, fmt.Errorf("--vault-ca-file: %w", err)
		}
		if err := vc.ConfigureTLS(&api.TLSConfig{CACert: cfg.CAFile}); err != nil {
			return nil, fmt.Errorf("--vault-ca-file: %w", err)
		}
	}
	c, err := api.NewClient(vc)
	if err != nil {
		return nil, fmt.Errorf("--vault-addr: %w", err)
	}
	// The client reads VAULT_TOKEN from the environment; only the
	// configured auth method may give it a token.
	c.ClearToken()
	m.api = c
	if err := m.login(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

// Client is the logged-in Vault client (its token is kept fresh by Run).
func (m *Manager) Client() *api.Client { return m.api }

// Logins counts successful logins (the first one included).
func (m *Manager) Logins() int64 { return m.logins.Load() }

// login logs in with the configured method. Its errors name the flag
// whose file or role is at fault, never a secret.
func (m *Manager) login(ctx context.Context) error {
	var (
		sec *api.Secret
		err error
	)
	switch m.cfg.Auth {
	case AuthToken:
		sec, err = m.tokenLogin(ctx)
	case AuthAppRole:
		sec, err = m.appRoleLogin(ctx)
	case AuthKubernetes:
		sec, err = m.k8sLogin(ctx)
	}
	if err != nil {
		m.fail("login", err)
		return err
	}
	if sec == nil || sec.Auth == nil || sec.Auth.ClientToken == "" {
		err := fmt.Errorf("--vault-auth %s: Vault returned no token", m.cfg.Auth)
		m.fail("login", err)
		return err
	}
	m.logins.Add(1)
	m.met.logins.Inc()
	now := m.now()
	m.mu.Lock()
	m.auth, m.loginAt = sec, now
	m.mu.Unlock()
	if sec.Auth.LeaseDuration > 0 {
		m.setExpiry("vault-token", now.Add(time.Duration(sec.Auth.LeaseDuration)*time.Second))
	}
	m.ok()
	m.log.Info("logged in to Vault", "auth", m.cfg.Auth, "renewable", sec.Auth.Renewable,
		"ttl", time.Duration(sec.Auth.LeaseDuration)*time.Second)
	return nil
}

func (m *Manager) tokenLogin(ctx context.Context) (*api.Secret, error) {
	tok, err := credfile.ReadSecret(m.cfg.TokenFile, "secret")
	if err != nil {
		return nil, fmt.Errorf("--vault-token-file: %w", err)
	}
	m.api.SetToken(tok)
	self, err := m.api.Auth().Token().LookupSelfWithContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("--vault-token-file: looking up the token at --vault-addr %s: %w", m.cfg.Addr, err)
	}
	ttl, _ := self.TokenTTL()
	renewable, _ := self.TokenIsRenewable()
	return &api.Secret{Auth: &api.SecretAuth{ClientToken: tok, Renewable: renewable, LeaseDuration: int(ttl.Seconds())}}, nil
}

func (m *Manager) appRoleLogin(ctx context.Context) (*api.Secret, error) {
	roleID, err := credfile.ReadSecret(m.cfg.RoleIDFile, "secret")
	if err != nil {
		return nil, fmt.Errorf("--vault-approle-role-id-file: %w", err)
	}
	if _, err := credfile.ReadSecret(m.cfg.SecretIDFile, "secret"); err != nil {
		return nil, fmt.Errorf("--vault-approle-secret-id-file: %w", err)
	}
	a, err := approle.NewAppRoleAuth(roleID, &approle.SecretID{FromFile: m.cfg.SecretIDFile}, approle.WithMountPath(m.cfg.authMount()))
	if err != nil {
		return nil, fmt.Errorf("--vault-auth approle: %w", err)
	}
	sec, err := m.api.Auth().Login(ctx, a)
	if err != nil {
		return nil, fmt.Errorf("--vault-auth approle: login at %s/v1/auth/%s/login: %w", m.cfg.Addr, m.cfg.authMount(), err)
	}
	return sec, nil
}

func (m *Manager) k8sLogin(ctx context.Context) (*api.Secret, error) {
	file := m.cfg.k8sTokenFile()
	if _, err := credfile.ReadSecret(file, "secret"); err != nil {
		return nil, fmt.Errorf("--vault-k8s-token-file: %w", err)
	}
	a, err := k8sauth.NewKubernetesAuth(m.cfg.Role, k8sauth.WithServiceAccountTokenPath(file), k8sauth.WithMountPath(m.cfg.authMount()))
	if err != nil {
		return nil, fmt.Errorf("--vault-auth kubernetes: %w", err)
	}
	sec, err := m.api.Auth().Login(ctx, a)
	if err != nil {
		return nil, fmt.Errorf("--vault-role %q: login at %s/v1/auth/%s/login: %w", m.cfg.Role, m.cfg.Addr, m.cfg.authMount(), err)
	}
	return sec, nil
}

// Run keeps the token alive until ctx ends: a LifetimeWatcher renews it,
// and when renewal stops (the token reached its max TTL, was revoked, or
// Vault did not answer) Run logs in again, retrying with backoff until it
// succeeds. A token that cannot be renewed but expires is replaced by a
// new login at two thirds of its TTL. Run never returns an error: Vault
// being down is reported (metrics, log, Readiness), never fatal.
func (m *Manager) Run(ctx context.Context) {
	for ctx.Err() == nil {
		m.watch(ctx)
		if ctx.Err() != nil {
			return
		}
		for attempt := 0; ctx.Err() == nil; attempt++ {
			if m.login(ctx) == nil {
				break
			}
			if !ctxtime.Sleep(ctx, m.backoff.Delay(attempt)) {
				return
			}
		}
	}
}

// watch returns when the current token needs a new login.
func (m *Manager) watch(ctx context.Context) {
	m.mu.Lock()
	sec, at := m.auth, m.loginAt
	m.mu.Unlock()
	ttl := time.Duration(sec.Auth.LeaseDuration) * time.Second
	if !sec.Auth.Renewable || ttl <= 0 {
		var due <-chan time.Time
		if ttl > 0 {
			t := time.NewTimer(RenewAt(at, at.Add(ttl)).Sub(m.now()))
			defer t.Stop()
			due = t.C
		}
		select {
		case <-ctx.Done():
		case <-m.reauth:
		case <-due:
		}
		return
	}
	w, err := m.api.NewLifetimeWatcher(&api.LifetimeWatcherInput{Secret: sec, RenewBehavior: api.RenewBehaviorErrorOnErrors})
	if err != nil {
		m.fail("renew", err)
		return
	}
	go w.Start()
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.reauth:
			return
		case err := <-w.DoneCh():
			if err != nil {
				m.fail("renew", err)
			} else {
				m.log.Info("the Vault token cannot be renewed further (max TTL); logging in again", "auth", m.cfg.Auth)
			}
			return
		case r := <-w.RenewCh():
			m.ok()
			if r.Secret != nil && r.Secret.Auth != nil {
				m.setExpiry("vault-token", r.RenewedAt.Add(time.Duration(r.Secret.Auth.LeaseDuration)*time.Second))
			}
		}
	}
}

// ok records a successful call to Vault.
func (m *Manager) ok() {
	m.met.up.Set(1)
	m.mu.Lock()
	was := m.downSince
	m.up, m.downSince = true, time.Time{}
	m.mu.Unlock()
	if !was.IsZero() {
		m.log.Info("Vault answers again", "down_for", m.now().Sub(was).Round(time.Second))
	}
}

// fail records a failed call. A refused token (403) asks Run to log in
// again.
func (m *Manager) fail(op string, err error) {
	m.met.up.Set(0)
	m.met.errors.WithLabelValues(op).Inc()
	now := m.now()
	m.mu.Lock()
	if m.downSince.IsZero() {
		m.downSince = now
	}
	since := m.downSince
	m.up, m.lastOp, m.lastErr = false, op, err.Error()
	held := m.heldLocked(now)
	m.mu.Unlock()
	m.log.Warn("Vault call failed; keeping the current secrets and retrying with backoff",
		"operation", op, "err", err, "failing_since", since.UTC().Format(time.RFC3339), "held", held)
	var re *api.ResponseError
	if errors.As(err, &re) && re.StatusCode == http.StatusForbidden {
		select {
		case m.reauth <- struct{}{}:
		default:
		}
	}
}

// setExpiry records when the held value of a secret expires.
func (m *Manager) setExpiry(name string, at time.Time) {
	m.met.expiry.WithLabelValues(name).Set(float64(at.Unix()))
	m.mu.Lock()
	m.expiries[name] = at
	m.mu.Unlock()
}

// heldLocked lists the held secrets and their expiry, for logs.
func (m *Manager) heldLocked(now time.Time) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m.expiries)) {
		if k == "vault-token" {
			continue
		}
		st := "valid until " + m.expiries[k].UTC().Format(time.RFC3339)
		if !now.Before(m.expiries[k]) {
			st = "EXPIRED at " + m.expiries[k].UTC().Format(time.RFC3339)
		}
		parts = append(parts, k+" "+st)
	}
	return strings.Join(parts, ", ")
}

// Readiness says whether the secrets held are usable, and why: ready is
// false only when a held secret has expired (Vault being down while the
// secrets are still valid is reported in detail, not as unready, so a
// Vault outage never takes the process out of service on its own).
func (m *Manager) Readiness() (ready bool, detail string) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	ready = true
	for k, at := range m.expiries {
		if k != "vault-token" && !now.Before(at) {
			ready = false
		}
	}
	held := m.heldLocked(now)
	if m.up {
		detail = "vault: ok"
	} else {
		detail = fmt.Sprintf("vault: unreachable or failing since %s (last error in %s: %s); keeping the current secrets and retrying",
			m.downSince.UTC().Format(time.RFC3339), m.lastOp, m.lastErr)
	}
	if held != "" {
		detail += "; " + held
	}
	return ready, detail
}

// Up reports whether the last call to Vault succeeded.
func (m *Manager) Up() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.up
}

type metrics struct {
	up     prometheus.Gauge
	errors *prometheus.CounterVec
	logins prometheus.Counter
	renews *prometheus.CounterVec
	expiry *prometheus.GaugeVec
}

func newMetrics(r prometheus.Registerer) *metrics {
	m := &metrics{
		up: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_vault_up",
			Help: "1 when the last call to Vault succeeded, 0 while Vault is unreachable or failing (the current secrets are kept)."}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_vault_errors_total",
			Help: "Failed calls to Vault, by operation (login, renew, kv, pki)."}, []string{"operation"}),
		logins: prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_vault_logins_total",
			Help: "Successful logins to Vault (the first, and each after the token could not be renewed)."}),
		renews: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_vault_secret_renewals_total",
			Help: "Secrets fetched again from Vault (KV refreshes, certificates issued), by secret."}, []string{"secret"}),
		expiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "meridian_vault_secret_expiry_timestamp_seconds",
			Help: "When the held value of a secret from Vault expires, in seconds since the epoch, by secret."}, []string{"secret"}),
	}
	for _, op := range []string{"login", "renew", "kv", "pki"} {
		m.errors.WithLabelValues(op)
	}
	r.MustRegister(m.up, m.errors, m.logins, m.renews, m.expiry)
	return m
}
