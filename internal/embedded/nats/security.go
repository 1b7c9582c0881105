package embednats

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
)

// Security makes the embedded server require client authentication, TLS
// or both, so that the credential and TLS options of transport/natsbus can
// be tested against the real server. Give at most one way to authenticate:
// Token, Users and NKeys (the last two may be combined), or operator mode
// (TrustedKeys with AccountJWTs).
type Security struct {
	// Token every client must present.
	Token string
	// Users maps user names to passwords.
	Users map[string]string
	// NKeys are the public user nkeys ("U...") allowed to connect; the
	// client proves it holds the seed by signing the server's nonce.
	NKeys []string
	// TrustedKeys are operator public keys ("O..."): the server runs in
	// operator (JWT) mode and accepts users whose JWT is issued by an
	// account in AccountJWTs, as a .creds file carries them.
	TrustedKeys []string
	// OperatorJWTs are operator JWTs to trust, as a production server's
	// "operator" setting names them: the operator's key and its signing
	// keys. The directory resolver (ResolverDir) needs one.
	OperatorJWTs []string
	// AccountJWTs maps account public keys ("A...") to their JWTs, signed
	// by a trusted operator key; served by an in-memory resolver.
	AccountJWTs map[string]string
	// SystemAccount is the public key of the system account in operator
	// mode; empty runs without one.
	SystemAccount string
	// ResolverDir, in operator mode, keeps account JWTs in this directory
	// (NATS's "full" resolver, as a production NATS runs it): accounts
	// pushed over $SYS.REQ.ACCOUNT.<account>.CLAIMS.UPDATE by a system
	// user are stored and survive a restart, new accounts included. Empty
	// keeps them in memory: only accounts in AccountJWTs exist, and an
	// update changes the running server only.
	ResolverDir string
	// TLS, when set, is the server's TLS configuration: every client must
	// use TLS. Set ClientAuth (tls.RequireAndVerifyClientCert) and
	// ClientCAs in it to require client certificates.
	TLS *tls.Config
}

func (sec *Security) validate() error {
	if sec == nil {
		return nil
	}
	if sec.Token != "" && (len(sec.Users) > 0 || len(sec.NKeys) > 0) {
		return errors.New("embednats: Config.Security: Token cannot be combined with Users or NKeys")
	}
	if len(sec.TrustedKeys) > 0 && (sec.Token != "" || len(sec.Users) > 0 || len(sec.NKeys) > 0) {
		return errors.New("embednats: Config.Security: TrustedKeys (operator mode) cannot be combined with Token, Users or NKeys")
	}
	operatorMode := len(sec.TrustedKeys) > 0 || len(sec.OperatorJWTs) > 0
	if operatorMode && (sec.Token != "" || len(sec.Users) > 0 || len(sec.NKeys) > 0) {
		return errors.New("embednats: Config.Security.OperatorJWTs (operator mode) cannot be combined with Token, Users or NKeys")
	}
	if len(sec.AccountJWTs) > 0 && !operatorMode {
		return errors.New("embednats: Config.Security.AccountJWTs needs TrustedKeys or OperatorJWTs")
	}
	if sec.ResolverDir != "" && len(sec.OperatorJWTs) == 0 {
		return errors.New("embednats: Config.Security.ResolverDir needs OperatorJWTs")
	}
	for i, j := range sec.OperatorJWTs {
		if _, err := jwt.DecodeOperatorClaims(j); err != nil {
			return fmt.Errorf("embednats: Config.Security.OperatorJWTs[%d]: %w", i, err)
		}
	}
	if sec.ResolverDir != "" && sec.SystemAccount == "" {
		return errors.New("embednats: Config.Security.ResolverDir needs SystemAccount (updates come from system users)")
	}
	for name := range sec.Users {
		if strings.TrimSpace(name) == "" {
			return errors.New("embednats: Config.Security.Users has an empty user name")
		}
	}
	for i, k := range sec.NKeys {
		if !strings.HasPrefix(k, "U") {
			return fmt.Errorf("embednats: Config.Security.NKeys[%d] %q is not a public user nkey (U...)", i, k)
		}
	}
	for i, k := range sec.TrustedKeys {
		if !strings.HasPrefix(k, "O") {
			return fmt.Errorf("embednats: Config.Security.TrustedKeys[%d] %q is not a public operator key (O...)", i, k)
		}
	}
	if sec.TLS != nil && len(sec.TLS.Certificates) == 0 && sec.TLS.GetCertificate == nil {
		return errors.New("embednats: Config.Security.TLS has no server certificate")
	}
	return nil
}

// apply sets sec on the server options; validate has passed.
func (sec *Security) apply(opts *server.Options) error {
	if sec == nil {
		return nil
	}
	opts.Authorization = sec.Token
	for name, pw := range sec.Users {
		opts.Users = append(opts.Users, &server.User{Username: name, Password: pw})
	}
	for _, k := range sec.NKeys {
		opts.Nkeys = append(opts.Nkeys, &server.NkeyUser{Nkey: k})
	}
	if len(sec.TrustedKeys) > 0 || len(sec.OperatorJWTs) > 0 {
		opts.TrustedKeys = append([]string(nil), sec.TrustedKeys...)
		for _, j := range sec.OperatorJWTs {
			oc, _ := jwt.DecodeOperatorClaims(j) // checked by validate
			opts.TrustedOperators = append(opts.TrustedOperators, oc)
		}
		var res server.AccountResolver = &server.MemAccResolver{}
		if sec.ResolverDir != "" {
			dr, err := server.NewDirAccResolver(sec.ResolverDir, 0, 0, server.NoDelete)
			if err != nil {
				return fmt.Errorf("embednats: Config.Security.ResolverDir %q: %w", sec.ResolverDir, err)
			}
			res = dr
		}
		for pub, jwt := range sec.AccountJWTs {
			if err := res.Store(pub, jwt); err != nil {
				return fmt.Errorf("embednats: Config.Security.AccountJWTs[%s]: %w", pub, err)
			}
		}
		opts.AccountResolver = res
		opts.SystemAccount = sec.SystemAccount
		opts.NoSystemAccount = sec.SystemAccount == ""
	}
	if sec.TLS != nil {
		opts.TLS = true
		opts.TLSConfig = sec.TLS.Clone()
		opts.TLSVerify = sec.TLS.ClientAuth == tls.RequireAndVerifyClientCert
		opts.TLSTimeout = 2
	}
	return nil
}
