package auth

import (
	"context"
	"time"
)

// CertOptions configure client-certificate authentication.
type CertOptions struct {
	// UserPrefix is put before the certificate's CommonName, e.g. "cert:".
	UserPrefix string
	// GroupsPrefix is put before each Organization.
	GroupsPrefix string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Certs maps a client certificate chain the TLS listener verified (against
// the hub's --tls-client-ca) to a principal: CommonName is the user,
// each Organization a group, Method "cert". It never verifies a chain
// itself and reads only Credentials.VerifiedChains, so an unverified peer
// certificate can never reach it.
type Certs struct {
	opts CertOptions
	now  func() time.Time
}

var _ Authenticator = (*Certs)(nil)

// NewCerts returns a client-certificate method.
func NewCerts(opts CertOptions) *Certs {
	return &Certs{opts: opts, now: nowFunc(opts.Now)}
}

// Authenticate implements Authenticator. It does not apply when the
// request carries an Authorization header (the header decides) or no
// verified chain.
func (c *Certs) Authenticate(_ context.Context, cr Credentials) (*Principal, error) {
	if cr.Authorization != "" || cr.MultipleAuthorization || len(cr.VerifiedChains) == 0 || len(cr.VerifiedChains[0]) == 0 {
		return nil, errNotApplicable
	}
	leaf := cr.VerifiedChains[0][0]
	cn := leaf.Subject.CommonName
	if cn == "" || !printable(cn) {
		return nil, unauth(MethodCert, "client certificate has no usable common name", "certificate serial "+leaf.SerialNumber.String()+" has an empty or non-printable CommonName", nil)
	}
	now := c.now()
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		return nil, unauth(MethodCert, "client certificate expired or not yet valid", "certificate "+cn+" outside its validity period", nil)
	}
	p := &Principal{User: c.opts.UserPrefix + cn, Method: MethodCert, ExpiresAt: leaf.NotAfter}
	for _, o := range leaf.Subject.Organization {
		if o != "" && printable(o) {
			p.Groups = append(p.Groups, c.opts.GroupsPrefix+o)
		}
	}
	return p, nil
}

// printable reports whether s has no control characters.
func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == 0xfffd {
			return false
		}
	}
	return true
}
