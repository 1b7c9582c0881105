package config

import (
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/meridian-gpu/meridian/hub/quota"
	cc "github.com/meridian-gpu/meridian/internal/componentconfig"
)

// Options are the checks other packages contribute.
type Options struct {
	// ValidatePermission checks one permission string of
	// auth.authorization (hub/authz knows the names). nil accepts any
	// non-empty string. The error is shown after the permission's path,
	// so it should name the value (authz.ParsePermission's does).
	ValidatePermission func(permission string) error
}

// NewSchema returns the schema componentconfig loads a HubConfiguration
// with.
func NewSchema(opts Options) *cc.Schema[HubConfiguration] {
	return &cc.Schema[HubConfiguration]{
		APIVersion: APIVersion,
		Kind:       Kind,
		Fields:     Fields,
		Defaults:   Default,
		Complete:   Complete,
		Validate:   func(c *HubConfiguration) cc.ErrorList { return Validate(c, opts) },
	}
}

// Validate checks c (after Complete) and returns every problem, each
// naming its field path. It reads no file.
func Validate(c *HubConfiguration, opts Options) cc.ErrorList {
	var errs cc.ErrorList
	validateAPI(&errs, &c.API)
	validateStores(&errs, c)
	validateScheduling(&errs, &c.Scheduling)
	validateRetention(&errs, &c.Retention)
	validateAuth(&errs, c, opts)
	validateVault(&errs, c)
	if c.Audit.Retention < 0 {
		errs.Addf("audit.retention", "must be 0 (keep events forever) or positive (got %s)", c.Audit.Retention)
	}
	if c.Audit.MaxEvents < 0 {
		errs.Addf("audit.maxEvents", "must be 0 (no cap) or positive (got %d)", c.Audit.MaxEvents)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.Logging.Level)); err != nil {
		errs.Addf("logging.level", "want debug, info, warn or error (got %q)", c.Logging.Level)
	}
	if c.Logging.Format != "text" && c.Logging.Format != "json" {
		errs.Addf("logging.format", "want text or json (got %q)", c.Logging.Format)
	}
	return errs
}

func validateAPI(errs *cc.ErrorList, a *API) {
	for _, l := range a.listeners() {
		if _, _, err := net.SplitHostPort(l.addr); err != nil {
			errs.Addf(l.path, "want host:port, e.g. 127.0.0.1:7070 (got %q)", l.addr)
		}
	}
	if a.MaxRequestBytes < MinMaxRequestBytes {
		errs.Addf("api.maxRequestBytes", "must be at least %d (got %d)", MinMaxRequestBytes, a.MaxRequestBytes)
	}
	switch {
	case a.TLS.CertFile != "" && a.TLS.KeyFile == "":
		errs.Addf("api.tls.keyFile", "required with api.tls.certFile")
	case a.TLS.KeyFile != "" && a.TLS.CertFile == "":
		errs.Addf("api.tls.certFile", "required with api.tls.keyFile")
	}
	if a.TLS.ClientCAFile != "" && !a.TLS.Enabled() {
		errs.Addf("api.tls.clientCAFile", "mutual TLS needs a server certificate: set api.tls.certFile and api.tls.keyFile")
	}
}

type listener struct{ path, addr string }

func (a *API) listeners() []listener {
	return []listener{{"api.grpcAddr", a.GRPCAddr}, {"api.httpAddr", a.HTTPAddr}}
}

func validateStores(errs *cc.ErrorList, c *HubConfiguration) {
	for i, ep := range c.Etcd.Endpoints {
		if strings.TrimSpace(ep) == "" {
			errs.Addf(fmt.Sprintf("etcd.endpoints[%d]", i), "is empty")
		}
	}
	if c.Etcd.MaxTxnOps < 0 {
		errs.Addf("etcd.maxTxnOps", "must be 0 (stock 128) or positive (got %d)", c.Etcd.MaxTxnOps)
	}
	validateEtcdSecurity(errs, &c.Etcd)
	checkPort(errs, "etcd.embeddedPort", c.Etcd.EmbeddedPort)
	checkPort(errs, "nats.embeddedPort", c.NATS.EmbeddedPort)
	embedded := len(c.Etcd.Endpoints) == 0 || c.NATS.URL == ""
	if embedded && strings.TrimSpace(c.DataDir) == "" {
		errs.Addf("dataDir", "required for the embedded etcd or NATS (or set both etcd.endpoints and nats.url)")
	}
	if c.NATS.URL == "" && c.NATS.AnyCredential() {
		errs.Addf("nats.url", "the NATS credential and TLS settings (--nats-creds, --nats-nkey, --nats-user, --nats-token-file, --nats-tls-*, "+
			"their MERIDIAN_NATS_* variables, nats.* in the file) need --nats-url: the embedded NATS listens on loopback without credentials")
	}
	validateSpokeAuth(errs, &c.NATS)
	if c.NATS.URL != "" {
		// A cluster's servers come comma-separated, as NATS clients take
		// them; each must be a URL of its own.
		for _, one := range strings.Split(c.NATS.URL, ",") {
			if u, err := url.Parse(strings.TrimSpace(one)); err != nil || u.Host == "" || strings.Contains(u.Host, ",") {
				errs.Addf("nats.url", "want a URL such as nats://10.0.0.6:4222, or several comma-separated (got %q)", c.NATS.URL)
				break
			}
		}
	}
	validateStreamReplicas(errs, &c.NATS)
}

func validateStreamReplicas(errs *cc.ErrorList, n *NATS) {
	switch r := n.StreamReplicas; {
	case r < 1 || r > MaxStreamReplicas:
		errs.Addf("nats.streamReplicas", "want 1..%d (got %d)", MaxStreamReplicas, r)
	case r > 1 && n.URL == "":
		errs.Addf("nats.streamReplicas", "the embedded NATS is a single server and keeps 1 replica (got %d); more need a NATS cluster (--nats-url)", r)
	}
}

func checkPort(errs *cc.ErrorList, path string, p int) {
	if p < 0 || p > 65535 {
		errs.Addf(path, "want a port in 0..65535, 0 for a free one (got %d)", p)
	}
}

func validateScheduling(errs *cc.ErrorList, s *Scheduling) {
	for _, d := range []struct {
		path string
		v    cc.Duration
	}{{"scheduling.period", s.Period}, {"scheduling.clusterTimeout", s.ClusterTimeout}, {"scheduling.leaderTTL", s.LeaderTTL}, {"scheduling.shapeHalfLife", s.ShapeHalfLife}} {
		if d.v <= 0 {
			errs.Addf(d.path, "must be positive (got %s)", d.v)
		}
	}
	if s.Window < 1 {
		errs.Addf("scheduling.window", "must be at least 1 (got %d)", s.Window)
	}
	for _, c := range slices.Sorted(maps.Keys(s.ClassWeights)) {
		if err := quota.CheckLedgerConfig(time.Hour, map[string]float64{c: s.ClassWeights[c]}); err != nil {
			_, msg, _ := strings.Cut(err.Error(), ": ")
			errs.Addf("scheduling.classWeights."+c, "%s", msg)
		}
	}
}

func validateRetention(errs *cc.ErrorList, r *Retention) {
	if r.IdempotencyWindow.D() < MinIdempotencyWindow {
		errs.Addf("retention.idempotencyWindow", "must be at least %s (got %s)", cc.Duration(MinIdempotencyWindow), r.IdempotencyWindow)
	}
	if r.TTL < 0 || (r.TTL > 0 && r.TTL < r.IdempotencyWindow) {
		errs.Addf("retention.ttl", "must be 0 (keep finished workloads forever) or at least %s, the retention.idempotencyWindow (got %s)",
			r.IdempotencyWindow, r.TTL)
	}
	if r.MaxFinishedPerQueue < 0 {
		errs.Addf("retention.maxFinishedPerQueue", "must be 0 (no cap) or positive (got %d)", r.MaxFinishedPerQueue)
	}
}

func validateAuth(errs *cc.ErrorList, c *HubConfiguration, opts Options) {
	a := &c.Auth
	switch a.Mode {
	case AuthOn:
	case AuthNone:
		for _, l := range c.API.listeners() {
			if !IsLoopback(l.addr) {
				errs.Addf("auth.mode", `"none" serves every caller without authentication; it is allowed only on loopback, and %s is %q`, l.path, l.addr)
				break
			}
		}
	default:
		errs.Addf("auth.mode", "want on or none (got %q)", a.Mode)
	}
	seen := map[string]int{}
	for i, is := range a.OIDC.Issuers {
		p := fmt.Sprintf("auth.oidc.issuers[%d]", i)
		if is.IssuerURL == "" {
			errs.Addf(p+".issuerURL", "required")
		} else if u, err := url.Parse(is.IssuerURL); err != nil || u.Host == "" || (u.Scheme != "https" && !(u.Scheme == "http" && IsLoopback(u.Host))) {
			errs.Addf(p+".issuerURL", "want an https URL such as https://login.example.com (http only for a loopback issuer) (got %q)", is.IssuerURL)
		} else if j, dup := seen[is.IssuerURL]; dup {
			errs.Addf(p+".issuerURL", "%q is also auth.oidc.issuers[%d]", is.IssuerURL, j)
		} else {
			seen[is.IssuerURL] = i
		}
		if strings.TrimSpace(is.Audience) == "" {
			errs.Addf(p+".audience", "required: the client id the tokens are issued for")
		}
		if is.UsernameClaim == "" {
			errs.Addf(p+".usernameClaim", "must not be empty")
		}
		if is.GroupsClaim == "" {
			errs.Addf(p+".groupsClaim", "must not be empty")
		}
	}
	checkPermissions(errs, "auth.authorization.groupPermissions", "group", a.Authorization.GroupPermissions, opts)
	checkPermissions(errs, "auth.authorization.userPermissions", "user", a.Authorization.UserPermissions, opts)
}

func checkPermissions(errs *cc.ErrorList, path, what string, m map[string][]string, opts Options) {
	for _, name := range slices.Sorted(maps.Keys(m)) {
		p := path + "." + name
		if strings.ContainsAny(name, ".[] ") || name == "" {
			p = fmt.Sprintf("%s[%q]", path, name)
		}
		if strings.TrimSpace(name) == "" {
			errs.Addf(p, "a %s name must not be empty", what)
		}
		for i, perm := range m[name] {
			pp := fmt.Sprintf("%s[%d]", p, i)
			switch {
			case strings.TrimSpace(perm) == "":
				errs.Addf(pp, "permission must not be empty")
			case opts.ValidatePermission != nil:
				if err := opts.ValidatePermission(perm); err != nil {
					errs.Addf(pp, "%v", err)
				}
			}
		}
	}
}

// IsLoopback reports whether a listen address (host:port, or a bare host)
// stays on this machine: localhost or a loopback IP. An empty host (all
// interfaces) is not loopback.
func IsLoopback(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// PlaintextNonLoopback lists the API listeners that would serve beyond
// loopback without TLS ("api.grpcAddr", "api.httpAddr"). The server does
// not act on it yet; once API TLS exists, the hub should refuse to start
// when this is not empty and api.allowInsecureNonLoopback is false.
func (c *HubConfiguration) PlaintextNonLoopback() []string {
	if c.API.TLS.Enabled() {
		return nil
	}
	var out []string
	for _, l := range c.API.listeners() {
		if !IsLoopback(l.addr) {
			out = append(out, l.path)
		}
	}
	return out
}

func validateSpokeAuth(errs *cc.ErrorList, n *NATS) {
	sa := n.SpokeAuth
	files := sa.OperatorSigningKeyFile != "" || sa.SystemCredsFile != ""
	switch {
	case files && !sa.Enabled:
		errs.Addf("nats.spokeAuth.enabled", "nats.spokeAuth.operatorSigningKeyFile and systemCredsFile need --nats-spoke-auth")
	case !sa.Enabled:
	case n.URL == "" && files:
		errs.Addf("nats.spokeAuth.operatorSigningKeyFile", "is for an external NATS (--nats-url); with the embedded NATS the hub makes its own operator")
	case n.URL != "" && sa.OperatorSigningKeyFile == "":
		errs.Addf("nats.spokeAuth.operatorSigningKeyFile", "required with --nats-spoke-auth and --nats-url: the seed of the operator's signing key (--nats-operator-signing-key)")
	case n.URL != "" && sa.SystemCredsFile == "":
		errs.Addf("nats.spokeAuth.systemCredsFile", "required with --nats-spoke-auth and --nats-url: a system-account user's .creds (--nats-system-creds)")
	}
	if sa.Enabled && (n.CredsFile != "" || n.NKeyFile != "" || n.User != "" || n.Token != "" || n.TokenFile != "") {
		errs.Addf("nats.credsFile", "the hub issues its own NATS user with --nats-spoke-auth; drop its --nats-creds, --nats-nkey, --nats-user or token")
	}
}

// validateEtcdSecurity checks the external etcd's TLS and user settings
// against each other and the endpoints; the server reads the files.
func validateEtcdSecurity(errs *cc.ErrorList, e *Etcd) {
	user := e.Username != "" || e.Password != "" || e.PasswordFile != ""
	if len(e.Endpoints) == 0 {
		if e.TLS.Enabled() || user {
			errs.Addf("etcd.endpoints", "the etcd TLS and user settings (--etcd-ca-file, --etcd-cert-file, --etcd-key-file, --etcd-username, "+
				"their MERIDIAN_ETCD_* variables, etcd.* in the file) need --etcd-endpoints: the embedded etcd listens on loopback without them")
		}
		return
	}
	switch {
	case e.TLS.CertFile != "" && e.TLS.KeyFile == "":
		errs.Addf("etcd.tls.keyFile", "required with etcd.tls.certFile (--etcd-key-file with --etcd-cert-file)")
	case e.TLS.KeyFile != "" && e.TLS.CertFile == "":
		errs.Addf("etcd.tls.certFile", "required with etcd.tls.keyFile (--etcd-cert-file with --etcd-key-file)")
	}
	switch {
	case e.Username == "" && (e.Password != "" || e.PasswordFile != ""):
		errs.Addf("etcd.username", "a password (--etcd-password-file or env MERIDIAN_ETCD_PASSWORD) needs --etcd-username")
	case e.Username != "" && e.Password == "" && e.PasswordFile == "":
		errs.Addf("etcd.passwordFile", "--etcd-username %q needs --etcd-password-file or env MERIDIAN_ETCD_PASSWORD", e.Username)
	case e.Password != "" && e.PasswordFile != "":
		errs.Addf("etcd.passwordFile", "give the password once: --etcd-password-file or env MERIDIAN_ETCD_PASSWORD, not both")
	}
	if !e.TLS.Enabled() {
		return
	}
	for i, ep := range e.Endpoints {
		if u, err := url.Parse(ep); err != nil || u.Scheme != "https" || u.Host == "" {
			errs.Addf(fmt.Sprintf("etcd.endpoints[%d]", i), "the etcd TLS settings (--etcd-ca-file, --etcd-cert-file, --etcd-key-file) need https:// endpoints; %q would connect in plaintext", ep)
		}
	}
}

func validateVault(errs *cc.ErrorList, c *HubConfiguration) {
	v := &c.Vault
	if v.Addr == "" {
		if v.PKIRole != "" || v.Auth != "" || v.EtcdPath != "" {
			errs.Addf("vault.addr", "required with vault.auth, vault.pkiRole and vault.etcdPath (--vault-addr)")
		}
		return
	}
	if v.EtcdPath != "" {
		e := c.Etcd
		if len(e.Endpoints) == 0 {
			errs.Addf("vault.etcdPath", "needs an external etcd (--etcd-endpoints)")
		}
		if e.Username != "" || e.Password != "" || e.PasswordFile != "" || e.TLS.CAFile != "" || e.TLS.CertFile != "" || e.TLS.KeyFile != "" {
			errs.Addf("vault.etcdPath", "the etcd credentials come from Vault; do not also give etcd.username, password, passwordFile or tls.*")
		}
		if strings.Trim(v.KVMount, "/") == "" {
			errs.Addf("vault.kvMount", "required with vault.etcdPath")
		}
	}
	if !strings.HasPrefix(v.Addr, "http://") && !strings.HasPrefix(v.Addr, "https://") {
		errs.Addf("vault.addr", "want http(s)://host:port (got %q)", v.Addr)
	}
	switch v.Auth {
	case "token":
		if v.TokenFile == "" {
			errs.Addf("vault.tokenFile", "required with vault.auth token (--vault-token-file)")
		}
	case "approle":
		if v.AppRoleRoleIDFile == "" || v.AppRoleSecretIDFile == "" {
			errs.Addf("vault.appRoleRoleIDFile", "vault.auth approle needs vault.appRoleRoleIDFile and vault.appRoleSecretIDFile")
		}
	case "kubernetes":
		if v.Role == "" {
			errs.Addf("vault.role", "required with vault.auth kubernetes (--vault-role)")
		}
	default:
		errs.Addf("vault.auth", "want token, approle or kubernetes (got %q)", v.Auth)
	}
	if v.PKIRole == "" {
		if v.EtcdPath == "" {
			errs.Addf("vault.addr", "nothing comes from Vault: give vault.pkiRole (--vault-pki-role), vault.etcdPath (--vault-etcd-path) or both")
		}
	} else {
		if c.API.TLS.CertFile != "" || c.API.TLS.KeyFile != "" {
			errs.Addf("vault.pkiRole", "the API serving certificate comes from Vault; do not also give api.tls.certFile or keyFile")
		}
		if v.PKICommonName == "" {
			errs.Addf("vault.pkiCommonName", "required with vault.pkiRole (--vault-pki-common-name)")
		}
		if strings.Trim(v.PKIMount, "/") == "" {
			errs.Addf("vault.pkiMount", "required with vault.pkiRole")
		}
		if v.PKITTL < 0 {
			errs.Addf("vault.pkiTTL", "must not be negative (got %s)", v.PKITTL)
		}
	}
}
