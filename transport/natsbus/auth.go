package natsbus

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/meridian-gpu/meridian/internal/credfile"
	"github.com/nats-io/nats.go"
)

// Credential and TLS options. Production NATS requires one credential per
// cluster and TLS; these options check their files when they are applied
// (at Connect, or at flag parsing through AuthFlags) so that a wrong path
// or a damaged file is reported by name before any connection attempt,
// not as a bare authorization failure from the server.

// WithCredsFile authenticates with a NATS credentials file: a user JWT and
// its nkey seed, as `nsc generate creds` writes them. Connect checks the
// file before dialling (both blocks present, a user JWT, not expired, a
// user seed); the client reads it again at every (re)connect, so a
// rotated file is picked up.
func WithCredsFile(path string) Option {
	return func(o *options) error {
		if err := checkCredsFile(path); err != nil {
			return fmt.Errorf("natsbus: creds file: %w", err)
		}
		o.natsOpts = append(o.natsOpts, nats.UserCredentials(path))
		return nil
	}
}

// WithUserJWT authenticates with a user JWT and its nkey seed held in
// memory (the hub uses it for the users it issues itself). Connect checks
// the JWT's shape, kind and expiry, and the seed's, before dialling.
func WithUserJWT(userJWT, seed string) Option {
	return func(o *options) error {
		if err := checkUserJWT(userJWT, time.Now()); err != nil {
			return fmt.Errorf("natsbus: user JWT: %w", err)
		}
		if !strings.HasPrefix(seed, "SU") {
			return errors.New("natsbus: user JWT: the seed is not a user nkey seed (want SU...)")
		}
		o.natsOpts = append(o.natsOpts, nats.UserJWTAndSeed(userJWT, seed))
		return nil
	}
}

// WithNKeySeedFile authenticates with a user nkey: path holds the seed
// ("SU..."), bare or decorated. The server must list the public key.
func WithNKeySeedFile(path string) Option {
	return func(o *options) error {
		opt, err := nkeyOption(path)
		if err != nil {
			return fmt.Errorf("natsbus: nkey seed file: %w", err)
		}
		o.natsOpts = append(o.natsOpts, opt)
		return nil
	}
}

// WithUserPassword authenticates with a user name and password. Read the
// password from a file or the environment, never from a command-line flag
// (it would show in ps).
func WithUserPassword(user, password string) Option {
	return func(o *options) error {
		if strings.TrimSpace(user) == "" {
			return errors.New("natsbus: user is empty")
		}
		if password == "" {
			return fmt.Errorf("natsbus: password of user %q is empty", user)
		}
		o.natsOpts = append(o.natsOpts, nats.UserInfo(user, password))
		return nil
	}
}

// WithToken authenticates with a token. Read it from a file or the
// environment, never from a command-line flag (it would show in ps).
func WithToken(token string) Option {
	return func(o *options) error {
		if strings.TrimSpace(token) == "" {
			return errors.New("natsbus: token is empty")
		}
		o.natsOpts = append(o.natsOpts, nats.Token(token))
		return nil
	}
}

// WithTokenFile authenticates with the token held in path (surrounding
// white space, such as a final newline, is ignored).
func WithTokenFile(path string) Option {
	return func(o *options) error {
		tok, err := credfile.ReadSecret(path, "secret")
		if err != nil {
			return fmt.Errorf("natsbus: token file: %w", err)
		}
		o.natsOpts = append(o.natsOpts, nats.Token(tok))
		return nil
	}
}

// WithTLS requires TLS. caFile is a PEM bundle of the CAs that sign the
// server's certificate (empty: the system's roots). certFile and keyFile
// are the client certificate and its key for mutual TLS; give both or
// neither. The files are read once, here.
func WithTLS(caFile, certFile, keyFile string) Option {
	return func(o *options) error {
		cfg, err := tlsConfig(caFile, certFile, keyFile, tlsNames{"CA file", "certificate file", "key file"})
		if err != nil {
			return fmt.Errorf("natsbus: TLS: %w", err)
		}
		o.natsOpts = append(o.natsOpts, nats.Secure(cfg))
		return nil
	}
}

// tlsNames are what errors call the three TLS inputs (option fields or
// command-line flags).
type tlsNames struct{ ca, cert, key string }

func tlsConfig(caFile, certFile, keyFile string, n tlsNames) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		b, err := credfile.Read(caFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n.ca, err)
		}
		certs, err := credfile.Certificates(b)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", n.ca, caFile, err)
		}
		cfg.RootCAs = x509.NewCertPool()
		for _, c := range certs {
			cfg.RootCAs.AddCert(c)
		}
	}
	switch {
	case certFile == "" && keyFile == "":
	case certFile == "":
		return nil, fmt.Errorf("%s %q is given without a %s", n.key, keyFile, n.cert)
	case keyFile == "":
		return nil, fmt.Errorf("%s %q is given without a %s", n.cert, certFile, n.key)
	default:
		cb, err := credfile.Read(certFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n.cert, err)
		}
		if _, err := credfile.Certificates(cb); err != nil {
			return nil, fmt.Errorf("%s %q: %w", n.cert, certFile, err)
		}
		kb, err := credfile.Read(keyFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n.key, err)
		}
		if blk, _ := pem.Decode(kb); blk == nil || !strings.Contains(blk.Type, "PRIVATE KEY") {
			return nil, fmt.Errorf("%s %q: no PEM private key in it", n.key, keyFile)
		}
		pair, err := tls.X509KeyPair(cb, kb)
		if err != nil {
			return nil, fmt.Errorf("%s %q and %s %q do not make a key pair: %w", n.cert, certFile, n.key, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// credsBlockRE matches the decorated blocks of a .creds file, as the nkeys
// package parses them: a dashed header line, the value, a dashed footer.
var credsBlockRE = regexp.MustCompile(`\s*(?:(?:-{3,}.*-{3,}\r?\n)([\w\-.=]+)(?:\r?\n-{3,}.*-{3,}(?:\r?\n|\z)))`)

func checkCredsFile(path string) error {
	b, err := credfile.Read(path)
	if err != nil {
		return err
	}
	blocks := credsBlockRE.FindAllSubmatch(b, -1)
	if len(blocks) < 2 {
		return fmt.Errorf("%q is not a NATS .creds file: want a user JWT block and a user nkey seed block (as `nsc generate creds` writes), found %d block(s)", path, len(blocks))
	}
	if err := checkUserJWT(string(blocks[0][1]), time.Now()); err != nil {
		return fmt.Errorf("%q: %w", path, err)
	}
	if !bytes.HasPrefix(blocks[1][1], []byte("SU")) {
		return fmt.Errorf("%q: the second block is not a user nkey seed (want SU...)", path)
	}
	// Let the client library parse the seed too (checksum, key type).
	if _, err := nats.NkeyOptionFromSeed(path); err != nil {
		return fmt.Errorf("%q: nkey seed: %w", path, err)
	}
	return nil
}

// checkUserJWT checks the shape, kind and expiry of a user JWT; the
// signature is the server's to check.
func checkUserJWT(tok string, now time.Time) error {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return errors.New("the first block is not a JWT (want header.claims.signature)")
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return fmt.Errorf("the JWT's claims are not base64url: %w", err)
	}
	var claims struct {
		Subject string `json:"sub"`
		Expires int64  `json:"exp"`
		NATS    struct {
			Type string `json:"type"`
		} `json:"nats"`
	}
	if err := json.Unmarshal(raw, &claims); err != nil {
		return fmt.Errorf("the JWT's claims are not JSON: %w", err)
	}
	if claims.NATS.Type != "user" {
		return fmt.Errorf("the JWT is a %q JWT, want a user JWT", claims.NATS.Type)
	}
	if claims.Expires > 0 && now.Unix() >= claims.Expires {
		return fmt.Errorf("the user JWT of %s expired at %s", claims.Subject, time.Unix(claims.Expires, 0).UTC().Format(time.RFC3339))
	}
	return nil
}

func nkeyOption(path string) (nats.Option, error) {
	if _, err := credfile.Read(path); err != nil {
		return nil, err
	}
	opt, err := nats.NkeyOptionFromSeed(path)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", path, err)
	}
	return opt, nil
}

// Environment variables read by AuthFlags. Secrets themselves may come from
// the environment (never from a flag value, which ps shows).
const (
	EnvNATSCreds        = "MERIDIAN_NATS_CREDS"
	EnvNATSNKey         = "MERIDIAN_NATS_NKEY"
	EnvNATSUser         = "MERIDIAN_NATS_USER"
	EnvNATSPassword     = "MERIDIAN_NATS_PASSWORD"
	EnvNATSPasswordFile = "MERIDIAN_NATS_PASSWORD_FILE"
	EnvNATSToken        = "MERIDIAN_NATS_TOKEN"
	EnvNATSTokenFile    = "MERIDIAN_NATS_TOKEN_FILE"
	EnvNATSTLSCA        = "MERIDIAN_NATS_TLS_CA"
	EnvNATSTLSCert      = "MERIDIAN_NATS_TLS_CERT"
	EnvNATSTLSKey       = "MERIDIAN_NATS_TLS_KEY"
)

// AuthFlags are the NATS credential and TLS flags that meridian-agent and
// meridian-hub share, so both spell them, document them and check them
// alike. Every flag defaults to its MERIDIAN_NATS_* environment variable.
type AuthFlags struct {
	CredsFile, NKeyFile           string
	User, PasswordFile, TokenFile string
	TLSCA, TLSCert, TLSKey        string
}

// Register adds the flags to fs, with defaults from the environment.
func (f *AuthFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.CredsFile, "nats-creds", os.Getenv(EnvNATSCreds), "NATS credentials file (user JWT + nkey seed, from nsc) (env "+EnvNATSCreds+")")
	fs.StringVar(&f.NKeyFile, "nats-nkey", os.Getenv(EnvNATSNKey), "file holding a NATS user nkey seed (SU...) (env "+EnvNATSNKey+")")
	fs.StringVar(&f.User, "nats-user", os.Getenv(EnvNATSUser), "NATS user name; the password comes from --nats-password-file or env "+EnvNATSPassword+" (env "+EnvNATSUser+")")
	fs.StringVar(&f.PasswordFile, "nats-password-file", os.Getenv(EnvNATSPasswordFile), "file holding the password of --nats-user (env "+EnvNATSPasswordFile+")")
	fs.StringVar(&f.TokenFile, "nats-token-file", os.Getenv(EnvNATSTokenFile), "file holding a NATS token; or give the token in env "+EnvNATSToken+" (env "+EnvNATSTokenFile+")")
	fs.StringVar(&f.TLSCA, "nats-tls-ca", os.Getenv(EnvNATSTLSCA), "PEM CA bundle that signs the NATS server's certificate; any --nats-tls-* flag turns TLS on (env "+EnvNATSTLSCA+")")
	fs.StringVar(&f.TLSCert, "nats-tls-cert", os.Getenv(EnvNATSTLSCert), "PEM client certificate for mutual TLS, with --nats-tls-key (env "+EnvNATSTLSCert+")")
	fs.StringVar(&f.TLSKey, "nats-tls-key", os.Getenv(EnvNATSTLSKey), "PEM private key of --nats-tls-cert (env "+EnvNATSTLSKey+")")
}

// Any reports whether a credential or TLS setting is given.
func (f *AuthFlags) Any() bool {
	return f.CredsFile != "" || f.NKeyFile != "" || f.User != "" || f.PasswordFile != "" || f.TokenFile != "" ||
		os.Getenv(EnvNATSToken) != "" || os.Getenv(EnvNATSPassword) != "" || f.TLSCA != "" || f.TLSCert != "" || f.TLSKey != ""
}

// Options checks the flags, reads their files and returns the Connect
// options. natsURL is checked for credentials of its own (user:password@),
// which may not be combined with the flags. Errors name the flag or the
// environment variable.
func (f *AuthFlags) Options(natsURL string) ([]Option, error) {
	token := strings.TrimSpace(os.Getenv(EnvNATSToken))
	password := os.Getenv(EnvNATSPassword)
	var methods []string
	if f.CredsFile != "" {
		methods = append(methods, "--nats-creds")
	}
	if f.NKeyFile != "" {
		methods = append(methods, "--nats-nkey")
	}
	if f.User != "" {
		methods = append(methods, "--nats-user")
	}
	if f.TokenFile != "" {
		methods = append(methods, "--nats-token-file")
	} else if token != "" {
		methods = append(methods, "env "+EnvNATSToken)
	}
	if len(methods) > 1 {
		return nil, fmt.Errorf("give one NATS credential, not %s", strings.Join(methods, " and "))
	}
	if len(methods) == 1 {
		if u, err := url.Parse(natsURL); err == nil && u.User != nil {
			return nil, fmt.Errorf("--nats-url carries credentials (user@host) and %s is given: use one", methods[0])
		}
	}
	if f.User == "" && (f.PasswordFile != "" || password != "") {
		return nil, fmt.Errorf("a password (--nats-password-file or env %s) needs --nats-user", EnvNATSPassword)
	}

	var opts []Option
	switch {
	case f.CredsFile != "":
		if err := checkCredsFile(f.CredsFile); err != nil {
			return nil, fmt.Errorf("--nats-creds: %w", err)
		}
		opts = append(opts, WithCredsFile(f.CredsFile))
	case f.NKeyFile != "":
		if _, err := nkeyOption(f.NKeyFile); err != nil {
			return nil, fmt.Errorf("--nats-nkey: %w", err)
		}
		opts = append(opts, WithNKeySeedFile(f.NKeyFile))
	case f.User != "":
		switch {
		case f.PasswordFile != "":
			pw, err := credfile.ReadSecret(f.PasswordFile, "secret")
			if err != nil {
				return nil, fmt.Errorf("--nats-password-file: %w", err)
			}
			password = pw
		case password == "":
			return nil, fmt.Errorf("--nats-user %q needs --nats-password-file or env %s", f.User, EnvNATSPassword)
		}
		opts = append(opts, WithUserPassword(f.User, password))
	case f.TokenFile != "":
		tok, err := credfile.ReadSecret(f.TokenFile, "secret")
		if err != nil {
			return nil, fmt.Errorf("--nats-token-file: %w", err)
		}
		opts = append(opts, WithToken(tok))
	case token != "":
		opts = append(opts, WithToken(token))
	}
	if f.TLSCA != "" || f.TLSCert != "" || f.TLSKey != "" {
		if _, err := tlsConfig(f.TLSCA, f.TLSCert, f.TLSKey, tlsNames{"--nats-tls-ca", "--nats-tls-cert", "--nats-tls-key"}); err != nil {
			return nil, err
		}
		opts = append(opts, WithTLS(f.TLSCA, f.TLSCert, f.TLSKey))
	}
	return opts, nil
}
