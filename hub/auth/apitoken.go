package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"
)

// API token format: TokenPrefix, the public id, "_", the secret:
//
//	mrd_<16 base32 chars: 10 random bytes>_<52 base32 chars: 32 random bytes>
//
// Base32 in lower case without padding has no "_", so the parts split
// unambiguously, and the whole token is one word to double-click and a
// fixed pattern for secret scanners.
const (
	TokenPrefix     = "mrd_"
	tokenIDBytes    = 10
	tokenSecretLen  = 32
	tokenIDChars    = 16 // base32 of 10 bytes
	tokenSecretChar = 52 // base32 of 32 bytes, unpadded
	tokenLen        = len(TokenPrefix) + tokenIDChars + 1 + tokenSecretChar
)

// TokenUserPrefix names the principal of an API token not bound to a user:
// "token:<id>".
const TokenUserPrefix = "token:"

var b32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Secret is an API token as issued: shown to its creator once, never
// stored. Every way of printing it (fmt verbs, slog, JSON, text) shows only
// the public id; Reveal returns the token itself.
type Secret struct {
	id string
	// v is behind a pointer so that printing a struct that holds a Secret
	// in an unexported field shows an address, not the token.
	v *string
}

// Reveal returns the full token, to hand to its creator once.
func (s Secret) Reveal() string {
	if s.v == nil {
		return ""
	}
	return *s.v
}

// ID is the token's public id.
func (s Secret) ID() string { return s.id }

// String redacts the secret.
func (s Secret) String() string { return TokenPrefix + s.id + "_[redacted]" }

// GoString redacts the secret.
func (s Secret) GoString() string { return "auth.Secret(" + s.String() + ")" }

// Format redacts the secret for every verb.
func (s Secret) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, s.String()) }

// LogValue redacts the secret.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText redacts the secret (JSON, YAML, slog's handlers).
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// newSecret makes a token from rnd: a fresh id and secret, and the
// secret's hash to store.
func newSecret(rnd io.Reader) (Secret, []byte, error) {
	buf := make([]byte, tokenIDBytes+tokenSecretLen)
	if _, err := io.ReadFull(rnd, buf); err != nil {
		return Secret{}, nil, fmt.Errorf("auth: random bytes for an API token: %w", err)
	}
	id := b32.EncodeToString(buf[:tokenIDBytes])
	sec := b32.EncodeToString(buf[tokenIDBytes:])
	tok := TokenPrefix + id + "_" + sec
	h := sha256.Sum256([]byte(sec))
	return Secret{id: id, v: &tok}, h[:], nil
}

// parseAPIToken splits a token into id and secret, checking lengths and
// alphabet exactly.
func parseAPIToken(tok string) (id, secret string, ok bool) {
	if len(tok) != tokenLen || !strings.HasPrefix(tok, TokenPrefix) {
		return "", "", false
	}
	rest := tok[len(TokenPrefix):]
	id, secret = rest[:tokenIDChars], rest[tokenIDChars+1:]
	if rest[tokenIDChars] != '_' || !isB32(id) || !isB32(secret) {
		return "", "", false
	}
	return id, secret, true
}

// ValidTokenID reports whether id has the form of an API token id.
func ValidTokenID(id string) bool { return len(id) == tokenIDChars && isB32(id) }

func isB32(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

// TokenRecord is what is stored about an API token: never the secret,
// only its SHA-256 (the secret has 256 bits of entropy, so a plain hash
// cannot be reversed by guessing).
type TokenRecord struct {
	// ID is the public id, the middle part of the token.
	ID string `json:"id"`
	// Name is a label its creator chose ("ci-deploy").
	Name string `json:"name,omitempty"`
	// User and Groups are whom the token acts as; when User is empty the
	// principal is "token:<id>".
	User   string   `json:"user,omitempty"`
	Groups []string `json:"groups,omitempty"`
	// Roles are the roles or permissions the token is bound to; opaque
	// here, passed to authorization in Principal.Roles.
	Roles []string `json:"roles,omitempty"`
	// CreatedBy is the user who issued it.
	CreatedBy string    `json:"created_by,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt is when it stops working; always set.
	ExpiresAt time.Time `json:"expires_at"`
	// RevokedAt, when set, is when it was revoked, and by whom.
	RevokedAt time.Time `json:"revoked_at,omitzero"`
	RevokedBy string    `json:"revoked_by,omitempty"`
	// LastUsedAt is recorded at most once per TokensOptions.TouchEvery.
	LastUsedAt time.Time `json:"last_used_at,omitzero"`
	// SecretHash is SHA-256 of the secret part of the token.
	SecretHash []byte `json:"secret_sha256"`
}

// Clone returns a deep copy of r.
func (r *TokenRecord) Clone() *TokenRecord {
	if r == nil {
		return nil
	}
	c := *r
	c.Groups = slices.Clone(r.Groups)
	c.Roles = slices.Clone(r.Roles)
	c.SecretHash = slices.Clone(r.SecretHash)
	return &c
}

// Revoked reports whether r was revoked.
func (r *TokenRecord) Revoked() bool { return !r.RevokedAt.IsZero() }

// newRandom is the source of token bytes; tests may replace it.
var newRandom io.Reader = rand.Reader
