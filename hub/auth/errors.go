package auth

import (
	"errors"
	"fmt"
)

// ErrUnauthenticated is matched (errors.Is) by every error that means the
// credentials were missing, malformed or not valid: answer 401 /
// codes.Unauthenticated.
var ErrUnauthenticated = errors.New("unauthenticated")

// ErrNoCredentials means the request carried no credentials at all. It also
// matches ErrUnauthenticated; callers use it to say "send a bearer token".
var ErrNoCredentials = fmt.Errorf("no credentials: %w", ErrUnauthenticated)

// ErrUnavailable means the credentials could not be checked now (identity
// provider unreachable, token store down): answer 503 / codes.Unavailable,
// the client may retry. It does not match ErrUnauthenticated.
var ErrUnavailable = errors.New("authentication unavailable")

// errNotApplicable is returned by a method whose kind of credential the
// request does not carry; the Chain then asks the next method.
var errNotApplicable = errors.New("credentials not for this method")

// Error is a failed authentication. Reason is safe to send to the client;
// Detail is for the audit log. Neither ever contains a secret.
type Error struct {
	// Method is the method that refused, or "" when none applied.
	Method Method
	// Reason is a short plain-words reason for the client.
	Reason string
	// Detail is the longer reason for the audit log (may name the issuer,
	// the token id, the claim that failed).
	Detail string
	kind   error // ErrUnauthenticated, ErrNoCredentials or ErrUnavailable
	cause  error // the underlying error, if any; audit detail only
}

// Error returns the client-safe reason only, so that an error passed on as
// is never says more than it should.
func (e *Error) Error() string {
	if e.kind == ErrUnavailable {
		return "authentication unavailable: " + e.Reason
	}
	return "unauthenticated: " + e.Reason
}

// Unwrap lets errors.Is match the kind sentinel and the cause.
func (e *Error) Unwrap() []error {
	if e.cause == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.cause}
}

func unauth(m Method, reason, detail string, cause error) *Error {
	return &Error{Method: m, Reason: reason, Detail: detail, kind: ErrUnauthenticated, cause: cause}
}

func unavailable(m Method, reason, detail string, cause error) *Error {
	return &Error{Method: m, Reason: reason, Detail: detail, kind: ErrUnavailable, cause: cause}
}

// IsUnauthenticated reports whether err means the credentials were missing
// or not valid.
func IsUnauthenticated(err error) bool { return errors.Is(err, ErrUnauthenticated) }

// IsNoCredentials reports whether err means the request carried none.
func IsNoCredentials(err error) bool { return errors.Is(err, ErrNoCredentials) }

// IsUnavailable reports whether err means authentication could not be
// done now and may succeed on retry.
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }

// ClientReason is what to tell the client about err: the safe reason of an
// *Error, or a generic phrase for any other error.
func ClientReason(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Error()
	}
	if IsUnavailable(err) {
		return "authentication unavailable"
	}
	return "unauthenticated"
}

// AuditDetail is what to write to the audit log about err: method, reason,
// detail and cause. It never contains a secret.
func AuditDetail(err error) string {
	var e *Error
	if !errors.As(err, &e) {
		if err == nil {
			return ""
		}
		return err.Error()
	}
	s := e.Error()
	if e.Method != "" {
		s = string(e.Method) + ": " + s
	}
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	if e.cause != nil {
		s += ": " + e.cause.Error()
	}
	return s
}
