package auth

import (
	"crypto/x509"
	"net"
	"strings"
)

// MaxAuthorizationLen is the longest Authorization value accepted, in
// bytes. Real ID tokens with many groups stay well below it.
const MaxAuthorizationLen = 8 << 10

// Credentials are what one request presented. Build one per request.
type Credentials struct {
	// Authorization is the raw value of the HTTP Authorization header or
	// of the gRPC metadata key "authorization" ("" when absent). When a
	// request carries several values, pass "" and set MultipleAuthorization.
	Authorization string
	// MultipleAuthorization is set when the request carried more than one
	// Authorization value; such a request is refused.
	MultipleAuthorization bool
	// VerifiedChains are the client certificate chains the TLS listener
	// verified against the client CA (tls.ConnectionState.VerifiedChains).
	// Never put unverified peer certificates here: they prove nothing.
	VerifiedChains [][]*x509.Certificate
	// RemoteAddr is the peer's address, for the audit log; may be nil.
	RemoteAddr net.Addr
}

// String describes the credentials without their secrets.
func (c Credentials) String() string {
	var b strings.Builder
	b.WriteString("Credentials{")
	switch {
	case c.MultipleAuthorization:
		b.WriteString("authorization: several")
	case c.Authorization == "":
		b.WriteString("authorization: none")
	default:
		b.WriteString("authorization: " + schemeName(c.Authorization) + " [redacted]")
	}
	if len(c.VerifiedChains) > 0 && len(c.VerifiedChains[0]) > 0 {
		b.WriteString(", cert: " + c.VerifiedChains[0][0].Subject.CommonName)
	}
	if c.RemoteAddr != nil {
		b.WriteString(", remote: " + c.RemoteAddr.String())
	}
	b.WriteString("}")
	return b.String()
}

// GoString is String, so %#v redacts too.
func (c Credentials) GoString() string { return c.String() }

// BearerToken parses the Authorization value strictly: "Bearer" (any case),
// one space, then a token68 (RFC 7235: letters, digits, "-._~+/" and
// trailing "="). It returns ErrNoCredentials when there is no value, and an
// *Error matching ErrUnauthenticated when it is malformed, oversized or of
// another scheme. The error never contains the value.
func (c Credentials) BearerToken() (string, error) {
	if c.MultipleAuthorization {
		return "", unauth("", "more than one authorization header", "request carried several Authorization values", nil)
	}
	return ParseAuthorization(c.Authorization)
}

// ParseAuthorization is BearerToken for a bare header value.
func ParseAuthorization(v string) (string, error) {
	if v == "" {
		return "", &Error{Reason: "no credentials: send a bearer token or a client certificate", kind: ErrNoCredentials}
	}
	if len(v) > MaxAuthorizationLen {
		return "", unauth("", "authorization header too large", "authorization header over the size limit", nil)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return "", unauth("", "malformed authorization header", "authorization header has non-printable or non-ASCII bytes", nil)
		}
	}
	scheme, tok, found := strings.Cut(v, " ")
	if !strings.EqualFold(scheme, "bearer") {
		return "", unauth("", "unsupported authorization scheme: use Bearer", "authorization scheme "+schemeName(v), nil)
	}
	if !found || tok == "" {
		return "", unauth("", "malformed authorization header: empty bearer token", "bearer token empty", nil)
	}
	if !isToken68(tok) {
		return "", unauth("", "malformed authorization header", "bearer token is not a token68", nil)
	}
	return tok, nil
}

// knownSchemes are the scheme names an error or String may repeat; any
// other first word might be a credential sent without a scheme.
var knownSchemes = []string{"Bearer", "Basic", "Digest", "Negotiate", "NTLM", "Token", "DPoP", "HOBA", "Mutual", "AWS4-HMAC-SHA256", "ApiKey"}

// schemeName is the scheme of an Authorization value if it is a known
// one, else "unknown".
func schemeName(v string) string {
	scheme, _, found := strings.Cut(v, " ")
	if !found {
		return "unknown (no scheme)"
	}
	for _, k := range knownSchemes {
		if strings.EqualFold(scheme, k) {
			return k
		}
	}
	return "unknown"
}

// isToken68 reports whether s is an RFC 7235 token68.
func isToken68(s string) bool {
	if s == "" {
		return false
	}
	end := len(s)
	for end > 0 && s[end-1] == '=' {
		end--
	}
	if end == 0 {
		return false
	}
	for i := 0; i < end; i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-', c == '.', c == '_', c == '~', c == '+', c == '/':
		default:
			return false
		}
	}
	return true
}
