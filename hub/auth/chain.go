package auth

import (
	"context"
	"errors"
	"time"
)

// Authenticator turns one request's credentials into a Principal.
//
// Contract: Authenticate is safe for concurrent use and returns a fresh
// Principal the caller may keep. It may do I/O (fetch an issuer's keys,
// read the token store) bounded by ctx and the method's own timeouts.
// Errors are *Error values matching ErrUnauthenticated or ErrUnavailable,
// or ErrNotApplicable (wrapped or not) when the request does not carry
// this method's kind of credential, so that a Chain asks the next method.
type Authenticator interface {
	Authenticate(ctx context.Context, c Credentials) (*Principal, error)
}

// ErrNotApplicable is what a method returns when the request carries no
// credential of its kind. A Chain never returns it.
var ErrNotApplicable = errNotApplicable

// Chain asks its methods in order and returns the first answer that is not
// ErrNotApplicable. A request with an Authorization header is judged by
// that header alone (a bad bearer token never falls back to the client
// certificate), and a malformed or oversized header is refused before any
// method sees it.
type Chain struct {
	methods []Authenticator
}

var _ Authenticator = (*Chain)(nil)

// NewChain returns a Chain over methods, asked in that order; nil entries
// are skipped.
func NewChain(methods ...Authenticator) *Chain {
	c := &Chain{}
	for _, m := range methods {
		if m != nil {
			c.methods = append(c.methods, m)
		}
	}
	return c
}

// Authenticate implements Authenticator.
func (c *Chain) Authenticate(ctx context.Context, cr Credentials) (*Principal, error) {
	hasHeader := cr.Authorization != "" || cr.MultipleAuthorization
	if hasHeader {
		if _, err := cr.BearerToken(); err != nil {
			return nil, err
		}
	}
	for _, m := range c.methods {
		p, err := m.Authenticate(ctx, cr)
		if errors.Is(err, errNotApplicable) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if p == nil {
			return nil, unauth("", "authentication failed", "a method returned neither a principal nor an error", nil)
		}
		return p, nil
	}
	switch {
	case hasHeader:
		return nil, unauth("", "bearer token not recognized", "no configured method accepts this kind of bearer token", nil)
	case len(cr.VerifiedChains) > 0:
		return nil, unauth("", "client certificates are not accepted: send a bearer token", "client certificate presented but certificate authentication is off", nil)
	}
	return nil, &Error{Reason: "no credentials: send a bearer token or a client certificate", kind: ErrNoCredentials}
}

// The fixed principal of None.
const (
	NoneUser  = "local-admin"
	NoneGroup = "meridian:local-admins"
)

// None authenticates every request as NoneUser in NoneGroup, whatever it
// carries. It is for a hub run with authentication off, which the caller
// must allow only on a loopback listener. The name says what the caller
// gets (everything, as authorization should grant NoneGroup all) and keeps
// the audit log honest: every action shows up as local-admin via "none".
type None struct{}

var _ Authenticator = None{}

// Authenticate implements Authenticator.
func (None) Authenticate(context.Context, Credentials) (*Principal, error) {
	return &Principal{User: NoneUser, Groups: []string{NoneGroup}, Method: MethodNone}, nil
}

// nowFunc returns f, or time.Now when f is nil.
func nowFunc(f func() time.Time) func() time.Time {
	if f == nil {
		return time.Now
	}
	return f
}
