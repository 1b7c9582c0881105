package spokeauth

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// Credential is one NATS user issued to a cluster. The seed is not here:
// the hub never keeps it.
type Credential struct {
	// PublicKey is the user's public nkey (U...), the name revocation uses.
	PublicKey string `json:"publicKey"`
	// IssuedAt is when the user JWT was signed.
	IssuedAt time.Time `json:"issuedAt"`
	// RevokedAt is when it was revoked; zero while it is valid.
	RevokedAt time.Time `json:"revokedAt,omitzero"`
}

// Active reports whether the credential is not revoked.
func (c Credential) Active() bool { return c.RevokedAt.IsZero() }

// Record is a registered cluster: the JSON at Prefix+"clusters/<id>".
type Record struct {
	Cluster     string       `json:"cluster"`
	Created     time.Time    `json:"created"`
	Credentials []Credential `json:"credentials"`
}

// MaxCredentials bounds the credentials one cluster record keeps, active
// and revoked. Revoked ones are kept because the account JWT's revocations
// are built from them; a rotation adds one, so this is many rotations.
const MaxCredentials = 256

// DecodeRecord parses and checks a cluster record. Errors name the field.
func DecodeRecord(b []byte) (*Record, error) {
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("spokeauth: cluster record: %w", err)
	}
	if err := natsbus.ValidateClusterID(r.Cluster); err != nil {
		return nil, fmt.Errorf("spokeauth: cluster record: cluster: %w", err)
	}
	if len(r.Credentials) > MaxCredentials {
		return nil, fmt.Errorf("spokeauth: cluster record %s: credentials: %d, at most %d", r.Cluster, len(r.Credentials), MaxCredentials)
	}
	seen := map[string]bool{}
	for i, c := range r.Credentials {
		if !nkeys.IsValidPublicUserKey(c.PublicKey) {
			return nil, fmt.Errorf("spokeauth: cluster record %s: credentials[%d].publicKey is not a public user nkey (U...)", r.Cluster, i)
		}
		if seen[c.PublicKey] {
			return nil, fmt.Errorf("spokeauth: cluster record %s: credentials[%d].publicKey %s appears twice", r.Cluster, i, c.PublicKey)
		}
		seen[c.PublicKey] = true
		if c.IssuedAt.IsZero() {
			return nil, fmt.Errorf("spokeauth: cluster record %s: credentials[%d].issuedAt is missing", r.Cluster, i)
		}
	}
	return &r, nil
}

// Active returns the credentials that are not revoked.
func (r *Record) Active() []Credential {
	var out []Credential
	for _, c := range r.Credentials {
		if c.Active() {
			out = append(out, c)
		}
	}
	return out
}

// revoke marks key (or, when key is empty, every active credential)
// revoked at now and returns what it revoked.
func (r *Record) revoke(key string, now time.Time) ([]Credential, error) {
	var out []Credential
	found := false
	for i := range r.Credentials {
		c := &r.Credentials[i]
		if key != "" && c.PublicKey != key {
			continue
		}
		found = true
		if c.Active() {
			c.RevokedAt = now
			out = append(out, *c)
		}
	}
	if key != "" && !found {
		return nil, fmt.Errorf("%w: cluster %s has no credential %s", ErrNotFound, r.Cluster, key)
	}
	return out, nil
}

// add appends c; it fails when the record holds MaxCredentials.
func (r *Record) add(c Credential) error {
	if len(r.Credentials) >= MaxCredentials {
		return fmt.Errorf("%w: cluster %s has had %d credentials, the most one record keeps", ErrTooMany, r.Cluster, len(r.Credentials))
	}
	r.Credentials = append(r.Credentials, c)
	return nil
}

// Errors callers tell apart with errors.Is.
var (
	// ErrExists: the cluster is registered already (Register without
	// rotate).
	ErrExists = errors.New("cluster is already registered")
	// ErrNotFound: no such cluster, or no such credential.
	ErrNotFound = errors.New("not found")
	// ErrTooMany: the cluster has had MaxCredentials credentials.
	ErrTooMany = errors.New("too many credentials")
	// ErrInvalid: a bad argument; the message names it.
	ErrInvalid = errors.New("invalid argument")
)
