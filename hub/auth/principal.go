package auth

import (
	"context"
	"log/slog"
	"slices"
	"time"
)

// Method names how a principal was authenticated.
type Method string

// The authentication methods.
const (
	MethodOIDC  Method = "oidc"
	MethodToken Method = "token"
	MethodCert  Method = "cert"
	MethodNone  Method = "none"
)

// Principal is who made a request, as the authenticator established it.
// Each call to Authenticate returns a fresh copy, so a caller may keep or
// change it without affecting cached results.
type Principal struct {
	// User is the user name, with the method's configured prefix.
	User string
	// Groups are the user's groups, with the method's configured prefix.
	Groups []string
	// Method is how the principal was authenticated.
	Method Method
	// Issuer is the OIDC issuer URL (MethodOIDC only).
	Issuer string
	// Subject is the OIDC "sub" claim (MethodOIDC only): stable even when
	// the user name comes from another claim such as "email".
	Subject string
	// TokenID is the public id of the API token (MethodToken only).
	TokenID string
	// Roles are the roles or permissions an API token is bound to
	// (MethodToken only); opaque here, interpreted by authorization.
	Roles []string
	// ExpiresAt is when the credential stops being valid (token expiry,
	// certificate NotAfter); zero when it never does (MethodNone).
	ExpiresAt time.Time
}

// Clone returns a deep copy of p; nil for nil.
func (p *Principal) Clone() *Principal {
	if p == nil {
		return nil
	}
	c := *p
	c.Groups = slices.Clone(p.Groups)
	c.Roles = slices.Clone(p.Roles)
	return &c
}

// LogValue gives the fields an audit line needs; a Principal holds no
// secret, so this is for compactness only.
func (p *Principal) LogValue() slog.Value {
	if p == nil {
		return slog.StringValue("<nil>")
	}
	attrs := []slog.Attr{slog.String("user", p.User), slog.String("method", string(p.Method))}
	if len(p.Groups) > 0 {
		attrs = append(attrs, slog.Any("groups", p.Groups))
	}
	if p.Issuer != "" {
		attrs = append(attrs, slog.String("issuer", p.Issuer))
	}
	if p.TokenID != "" {
		attrs = append(attrs, slog.String("token_id", p.TokenID))
	}
	return slog.GroupValue(attrs...)
}

type principalKey struct{}

// WithPrincipal returns a context carrying p.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal WithPrincipal stored in ctx, and
// whether there was one.
func PrincipalFrom(ctx context.Context) (*Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(*Principal)
	return p, ok && p != nil
}
