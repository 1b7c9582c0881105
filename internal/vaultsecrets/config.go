package vaultsecrets

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// The auth methods.
const (
	AuthToken      = "token"
	AuthAppRole    = "approle"
	AuthKubernetes = "kubernetes"
)

// DefaultK8sTokenFile is where Kubernetes mounts a pod's service account
// token.
const DefaultK8sTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"

// Config is how to reach Vault and log in. Errors name the command-line
// flags of meridian-agent and meridian-hub, which share these names.
type Config struct {
	// Addr is Vault's address, e.g. https://vault.example:8200 (--vault-addr).
	Addr string
	// CAFile is a PEM bundle that signs Vault's certificate; empty: the
	// system's roots (--vault-ca-file).
	CAFile string
	// Auth is token, approle or kubernetes (--vault-auth).
	Auth string
	// AuthMount is where the auth method is mounted; empty: "approle" or
	// "kubernetes" (--vault-auth-mount).
	AuthMount string
	// Role is the Kubernetes auth role (--vault-role).
	Role string
	// TokenFile holds a Vault token, for auth token (--vault-token-file).
	TokenFile string
	// RoleIDFile and SecretIDFile hold the AppRole role id and secret id
	// (--vault-approle-role-id-file, --vault-approle-secret-id-file).
	RoleIDFile, SecretIDFile string
	// K8sTokenFile is the service account token; empty: DefaultK8sTokenFile
	// (--vault-k8s-token-file).
	K8sTokenFile string
	// RequestTimeout bounds each call to Vault; 0: 30s.
	RequestTimeout time.Duration
	// Backoff paces retries; zero: DefaultBackoff.
	Backoff Backoff
}

// Validate checks c without reading a file or calling Vault. Its errors
// name the flags.
func (c *Config) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if strings.TrimSpace(c.Addr) == "" {
		add("--vault-addr: required when Vault is used")
	} else if u, err := url.Parse(c.Addr); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		add("--vault-addr: want http(s)://host:port (got %q)", c.Addr)
	}
	switch c.Auth {
	case AuthToken:
		if c.TokenFile == "" {
			add("--vault-token-file: required with --vault-auth token")
		}
	case AuthAppRole:
		if c.RoleIDFile == "" {
			add("--vault-approle-role-id-file: required with --vault-auth approle")
		}
		if c.SecretIDFile == "" {
			add("--vault-approle-secret-id-file: required with --vault-auth approle")
		}
	case AuthKubernetes:
		if c.Role == "" {
			add("--vault-role: required with --vault-auth kubernetes (the Vault Kubernetes auth role)")
		}
	case "":
		add("--vault-auth: required when Vault is used: token, approle or kubernetes")
	default:
		add("--vault-auth: want token, approle or kubernetes (got %q)", c.Auth)
	}
	if c.RequestTimeout < 0 {
		add("vault request timeout must not be negative (got %s)", c.RequestTimeout)
	}
	return errors.Join(errs...)
}

func (c *Config) authMount() string {
	if c.AuthMount != "" {
		return strings.Trim(c.AuthMount, "/")
	}
	return c.Auth
}

func (c *Config) k8sTokenFile() string {
	if c.K8sTokenFile != "" {
		return c.K8sTokenFile
	}
	return DefaultK8sTokenFile
}
