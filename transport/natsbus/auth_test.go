package natsbus

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base32"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	embednats "github.com/meridian-gpu/meridian/internal/embedded/nats"
)

// The tests below run the real nats-server (embedded) with each kind of
// authentication and with TLS. The nkeys and JWTs are minted here with
// crypto/ed25519 (the nkeys and jwt modules are only indirect dependencies
// of this module), the certificates with crypto/x509.

// nkey is an ed25519 key pair in the nkeys encoding.
type nkey struct {
	priv   ed25519.PrivateKey
	public string // "U...", "A..." or "O..."
	seed   string // "SU...", "SA..." or "SO..."
}

const (
	nkeyPrefixSeed     = 18 << 3
	nkeyPrefixOperator = 14 << 3
	nkeyPrefixAccount  = 0
	nkeyPrefixUser     = 20 << 3
)

// crc16 is CRC-16/XMODEM, the checksum nkeys append.
func crc16(data []byte) uint16 {
	var crc uint16
	for _, b := range data {
		crc ^= uint16(b) << 8
		for i := 0; i < 8; i++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

func nkeyEncode(raw []byte) string {
	raw = binary.LittleEndian.AppendUint16(raw, crc16(raw))
	return base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(raw)
}

func newNKey(t testing.TB, prefix byte) nkey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return nkey{
		priv:   priv,
		public: nkeyEncode(append([]byte{prefix}, pub...)),
		seed:   nkeyEncode(append([]byte{nkeyPrefixSeed | prefix>>5, (prefix & 31) << 3}, priv.Seed()...)),
	}
}

// mintJWT signs claims (a NATS v2 JWT) with issuer's key.
func mintJWT(t testing.TB, issuer nkey, subject, name string, natsClaims map[string]any, exp time.Time) string {
	t.Helper()
	enc := base64.RawURLEncoding
	natsClaims["version"] = 2
	claims := map[string]any{"jti": fmt.Sprintf("%x", time.Now().UnixNano()), "iat": time.Now().Unix(),
		"iss": issuer.public, "sub": subject, "name": name, "nats": natsClaims}
	if !exp.IsZero() {
		claims["exp"] = exp.Unix()
	}
	body, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	signed := enc.EncodeToString([]byte(`{"typ":"JWT","alg":"ed25519-nkey"}`)) + "." + enc.EncodeToString(body)
	return signed + "." + enc.EncodeToString(ed25519.Sign(issuer.priv, []byte(signed)))
}

// operatorSetup is an operator, one account with JetStream and the server
// security that trusts them.
type operatorSetup struct {
	operator, account nkey
	sec               *embednats.Security
}

func newOperatorSetup(t testing.TB) operatorSetup {
	op, acc, sys := newNKey(t, nkeyPrefixOperator), newNKey(t, nkeyPrefixAccount), newNKey(t, nkeyPrefixAccount)
	account := func(name string, js bool) map[string]any {
		limits := map[string]any{"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
			"wildcards": true, "conn": -1, "leaf": -1}
		if js {
			limits["mem_storage"], limits["disk_storage"], limits["streams"], limits["consumer"] = -1, -1, -1, -1
		}
		return map[string]any{"type": "account", "limits": limits,
			"default_permissions": map[string]any{"pub": map[string]any{}, "sub": map[string]any{}}}
	}
	// JetStream in operator mode needs a system account.
	return operatorSetup{operator: op, account: acc, sec: &embednats.Security{
		TrustedKeys: []string{op.public}, SystemAccount: sys.public,
		AccountJWTs: map[string]string{
			acc.public: mintJWT(t, op, acc.public, "meridian", account("meridian", true), time.Time{}),
			sys.public: mintJWT(t, op, sys.public, "SYS", account("SYS", false), time.Time{}),
		},
	}}
}

// credsFile writes a .creds file for a new user of account, in the layout
// nsc writes, and returns its path.
func credsFile(t testing.TB, account nkey, exp time.Time) string {
	t.Helper()
	user := newNKey(t, nkeyPrefixUser)
	jwt := mintJWT(t, account, user.public, "agent", map[string]any{
		"type": "user", "pub": map[string]any{}, "sub": map[string]any{}, "subs": -1, "data": -1, "payload": -1,
	}, exp)
	creds := fmt.Sprintf("-----BEGIN NATS USER JWT-----\n%s\n------END NATS USER JWT------\n\n"+
		"************************* IMPORTANT *************************\nNKEY Seed printed below can be used to sign and prove identity.\n\n"+
		"-----BEGIN USER NKEY SEED-----\n%s\n------END USER NKEY SEED------\n\n*************************************************************\n", jwt, user.seed)
	return writeFile(t, "agent.creds", creds)
}

func writeFile(t testing.TB, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// testCA is a certificate authority for one test.
type testCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	pemFile string
}

func newCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pemFile: writeFile(t, name+".pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))}
}

// issue returns a leaf certificate for 127.0.0.1 (server and client use)
// and the paths of its PEM certificate and key.
func (ca *testCA) issue(t testing.TB, name string) (tls.Certificate, string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pair, writeFile(t, name+".crt", string(certPEM)), writeFile(t, name+".key", string(keyPEM))
}

func secureServer(t testing.TB, sec *embednats.Security) *embednats.Server {
	t.Helper()
	s, err := embednats.Start(embednats.Config{StoreDir: t.TempDir(), Security: sec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// connectAndPublish connects with opts, creates the streams and publishes
// one event that JetStream must store.
func connectAndPublish(t *testing.T, url string, opts ...Option) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := Connect(ctx, url, append([]Option{WithReconnectWait(20 * time.Millisecond)}, opts...)...)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := b.EnsureStreams(ctx); err != nil {
		t.Fatalf("connected but cannot create the streams: %v", err)
	}
	dup, err := b.PublishEvent(ctx, "east", "ev-1", []byte(`{}`))
	if err != nil || dup {
		t.Fatalf("connected but the event was not stored: duplicate %v, %v", dup, err)
	}
	return nil
}

func TestAuthCredentialsAgainstRealServer(t *testing.T) {
	userKey, otherKey := newNKey(t, nkeyPrefixUser), newNKey(t, nkeyPrefixUser)
	userSeed := writeFile(t, "user.nk", userKey.seed+"\n")
	otherSeed := writeFile(t, "other.nk", otherKey.seed+"\n")
	op := newOperatorSetup(t)
	strangerAccount := newNKey(t, nkeyPrefixAccount) // not known to the server

	tests := map[string]struct {
		sec  *embednats.Security
		opts []Option
		want string // "" = connects and publishes; else in the error
	}{
		"token":                 {&embednats.Security{Token: "s3cr3t"}, []Option{WithToken("s3cr3t")}, ""},
		"token from file":       {&embednats.Security{Token: "s3cr3t"}, []Option{WithTokenFile(writeFile(t, "tok", "s3cr3t\n"))}, ""},
		"wrong token":           {&embednats.Security{Token: "s3cr3t"}, []Option{WithToken("guess")}, "Authorization Violation"},
		"no token":              {&embednats.Security{Token: "s3cr3t"}, nil, "Authorization Violation"},
		"user and password":     {&embednats.Security{Users: map[string]string{"agent": "pw"}}, []Option{WithUserPassword("agent", "pw")}, ""},
		"wrong password":        {&embednats.Security{Users: map[string]string{"agent": "pw"}}, []Option{WithUserPassword("agent", "nope")}, "Authorization Violation"},
		"nkey":                  {&embednats.Security{NKeys: []string{userKey.public}}, []Option{WithNKeySeedFile(userSeed)}, ""},
		"nkey not listed":       {&embednats.Security{NKeys: []string{userKey.public}}, []Option{WithNKeySeedFile(otherSeed)}, "Authorization Violation"},
		"no nkey":               {&embednats.Security{NKeys: []string{userKey.public}}, nil, "Authorization Violation"},
		"creds":                 {op.sec, []Option{WithCredsFile(credsFile(t, op.account, time.Now().Add(time.Hour)))}, ""},
		"creds of another acct": {op.sec, []Option{WithCredsFile(credsFile(t, strangerAccount, time.Time{}))}, "Authorization Violation"},
		"expired creds":         {op.sec, []Option{WithCredsFile(credsFile(t, op.account, time.Now().Add(-time.Minute)))}, "expired"},
		"no creds":              {op.sec, nil, "Authorization Violation"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := secureServer(t, tc.sec)
			err := connectAndPublish(t, s.ClientURL(), tc.opts...)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("want a working connection, got %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("connected; want an error with %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func TestAuthTLSAgainstRealServer(t *testing.T) {
	ca, otherCA := newCA(t, "meridian-ca"), newCA(t, "other-ca")
	serverCert, _, _ := ca.issue(t, "nats-server")
	_, clientCrt, clientKey := ca.issue(t, "agent")
	_, strangerCrt, strangerKey := otherCA.issue(t, "stranger")
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	tlsOnly := &tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12}
	mutual := &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}

	tests := map[string]struct {
		server *tls.Config
		token  string
		opts   []Option
		want   string
	}{
		"right CA":          {tlsOnly, "", []Option{WithTLS(ca.pemFile, "", "")}, ""},
		"wrong CA":          {tlsOnly, "", []Option{WithTLS(otherCA.pemFile, "", "")}, "certificate signed by unknown authority"},
		"system roots only": {tlsOnly, "", []Option{WithTLS("", "", "")}, "certificate"},
		"no TLS config":     {tlsOnly, "", nil, "certificate signed by unknown authority"},
		"mutual TLS":        {mutual, "", []Option{WithTLS(ca.pemFile, clientCrt, clientKey)}, ""},
		// The server refuses these handshakes; what the client sees depends
		// on TLS 1.3 timing (a handshake alert or EOF), so any error does.
		"mutual TLS without cert":    {mutual, "", []Option{WithTLS(ca.pemFile, "", "")}, "*"},
		"client cert of another CA":  {mutual, "", []Option{WithTLS(ca.pemFile, strangerCrt, strangerKey)}, "*"},
		"TLS and token":              {tlsOnly, "tk", []Option{WithTLS(ca.pemFile, "", ""), WithToken("tk")}, ""},
		"TLS and wrong token":        {tlsOnly, "tk", []Option{WithTLS(ca.pemFile, "", ""), WithToken("x")}, "Authorization Violation"},
		"CA bundle with both CAs ok": {tlsOnly, "", []Option{WithTLS(writeFile(t, "bundle.pem", readAll(t, otherCA.pemFile)+readAll(t, ca.pemFile)), "", "")}, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := secureServer(t, &embednats.Security{TLS: tc.server, Token: tc.token})
			err := connectAndPublish(t, s.ClientURL(), tc.opts...)
			if tc.want == "*" {
				if err == nil {
					t.Fatal("connected without a client certificate the server trusts")
				}
				return
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("want a working connection, got %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("connected; want an error with %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func readAll(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAuthOptionsRefuseBadFiles(t *testing.T) {
	ca := newCA(t, "ca")
	_, crt, key := ca.issue(t, "c")
	_, crt2, _ := ca.issue(t, "c2")
	op := newOperatorSetup(t)
	acctSeed := writeFile(t, "acct.nk", op.account.seed)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	unreadable := writeFile(t, "unreadable", "x")
	if err := os.Chmod(unreadable, 0); err != nil {
		t.Fatal(err)
	}
	canRead := false
	if f, err := os.Open(unreadable); err == nil { // root reads anything
		canRead = true
		f.Close()
	}
	userJWTOnly := strings.SplitN(readAll(t, credsFile(t, op.account, time.Time{})), "\n\n", 2)[0] + "\n"
	// The seed is the only line that starts with SU (the JWT line starts with eyJ).
	accountAsUser := strings.Replace(readAll(t, credsFile(t, op.account, time.Time{})), "\nSU", "\nSA", 1)

	tests := map[string]struct {
		opt  Option
		want []string
	}{
		"creds missing":         {WithCredsFile(missing), []string{"creds file", missing, "does not exist"}},
		"creds is a directory":  {WithCredsFile(dir), []string{"creds file", "is a directory"}},
		"creds not creds":       {WithCredsFile(writeFile(t, "x.creds", "hello\n")), []string{"creds file", "not a NATS .creds file"}},
		"creds without seed":    {WithCredsFile(writeFile(t, "jwt.creds", userJWTOnly)), []string{"creds file", "found 1 block"}},
		"creds with acct seed":  {WithCredsFile(writeFile(t, "a.creds", accountAsUser)), []string{"creds file", "not a user nkey seed"}},
		"nkey missing":          {WithNKeySeedFile(missing), []string{"nkey seed file", "does not exist"}},
		"nkey of an account":    {WithNKeySeedFile(acctSeed), []string{"nkey seed file", "user"}},
		"nkey garbage":          {WithNKeySeedFile(writeFile(t, "g.nk", "SUnotakey\n")), []string{"nkey seed file", "g.nk"}},
		"token file missing":    {WithTokenFile(missing), []string{"token file", "does not exist"}},
		"token file empty":      {WithTokenFile(writeFile(t, "empty", "\n")), []string{"token file", "is empty"}},
		"token file two lines":  {WithTokenFile(writeFile(t, "two", "a\nb\n")), []string{"token file", "more than one line"}},
		"empty token":           {WithToken(" "), []string{"token is empty"}},
		"empty user":            {WithUserPassword("", "pw"), []string{"user is empty"}},
		"empty password":        {WithUserPassword("agent", ""), []string{"password", "agent"}},
		"CA missing":            {WithTLS(missing, "", ""), []string{"TLS: CA file", "does not exist"}},
		"CA not PEM":            {WithTLS(writeFile(t, "ca.txt", "not pem"), "", ""), []string{"CA file", "no PEM certificate"}},
		"CA damaged":            {WithTLS(writeFile(t, "bad.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("junk")}))), "", ""), []string{"CA file", "certificate 1"}},
		"cert without key":      {WithTLS(ca.pemFile, crt, ""), []string{"certificate file", "without a key file"}},
		"key without cert":      {WithTLS(ca.pemFile, "", key), []string{"key file", "without a certificate file"}},
		"key is not a key":      {WithTLS(ca.pemFile, crt, crt), []string{"key file", "no PEM private key"}},
		"cert and key mismatch": {WithTLS(ca.pemFile, crt2, key), []string{"do not make a key pair"}},
		"cert missing":          {WithTLS("", missing, key), []string{"certificate file", "does not exist"}},
	}
	if !canRead {
		tests["token file unreadable"] = struct {
			opt  Option
			want []string
		}{WithTokenFile(unreadable), []string{"token file", "permission denied"}}
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var o options
			err := tc.opt(&o)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			// Connect refuses before dialling: nothing listens at this URL.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if _, err2 := Connect(ctx, "nats://127.0.0.1:1", tc.opt); err2 == nil || err2.Error() != err.Error() {
				t.Errorf("Connect = %v, want the option's error %v", err2, err)
			}
		})
	}
}

func TestAuthFlags(t *testing.T) {
	for _, env := range []string{EnvNATSCreds, EnvNATSNKey, EnvNATSUser, EnvNATSPassword, EnvNATSPasswordFile,
		EnvNATSToken, EnvNATSTokenFile, EnvNATSTLSCA, EnvNATSTLSCert, EnvNATSTLSKey} {
		t.Setenv(env, "")
	}
	ca := newCA(t, "ca")
	_, crt, key := ca.issue(t, "c")
	tok := writeFile(t, "token", "s3cr3t\n")
	pw := writeFile(t, "pw", "pw\n")
	missing := filepath.Join(t.TempDir(), "nope")
	parse := func(t *testing.T, env map[string]string, args ...string) (*AuthFlags, []Option, error) {
		t.Helper()
		for k, v := range env {
			t.Setenv(k, v)
		}
		var f AuthFlags
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f.Register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		opts, err := f.Options("nats://127.0.0.1:4222")
		return &f, opts, err
	}

	t.Run("bad", func(t *testing.T) {
		for name, tc := range map[string]struct {
			env  map[string]string
			args []string
			want []string
		}{
			"missing creds":       {nil, []string{"--nats-creds", missing}, []string{"--nats-creds", missing, "does not exist"}},
			"missing creds (env)": {map[string]string{EnvNATSCreds: missing}, nil, []string{"--nats-creds", "does not exist"}},
			"missing nkey":        {nil, []string{"--nats-nkey", missing}, []string{"--nats-nkey", "does not exist"}},
			"missing token file":  {nil, []string{"--nats-token-file", missing}, []string{"--nats-token-file", "does not exist"}},
			"missing CA":          {nil, []string{"--nats-tls-ca", missing}, []string{"--nats-tls-ca", "does not exist"}},
			"cert without key":    {nil, []string{"--nats-tls-cert", crt}, []string{"--nats-tls-cert", "without a --nats-tls-key"}},
			"bad key":             {nil, []string{"--nats-tls-cert", crt, "--nats-tls-key", tok}, []string{"--nats-tls-key", "no PEM private key"}},
			"CA not PEM":          {map[string]string{EnvNATSTLSCA: tok}, nil, []string{"--nats-tls-ca", "no PEM certificate"}},
			"two credentials":     {nil, []string{"--nats-token-file", tok, "--nats-user", "a"}, []string{"one NATS credential", "--nats-user", "--nats-token-file"}},
			"token env and creds": {map[string]string{EnvNATSToken: "t"}, []string{"--nats-nkey", tok}, []string{"--nats-nkey", "env " + EnvNATSToken}},
			"user no password":    {nil, []string{"--nats-user", "agent"}, []string{"--nats-user", "--nats-password-file", EnvNATSPassword}},
			"password no user":    {nil, []string{"--nats-password-file", pw}, []string{"needs --nats-user"}},
			"missing password":    {nil, []string{"--nats-user", "a", "--nats-password-file", missing}, []string{"--nats-password-file", "does not exist"}},
		} {
			t.Run(name, func(t *testing.T) {
				_, _, err := parse(t, tc.env, tc.args...)
				if err == nil {
					t.Fatal("accepted")
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
			})
		}
	})

	t.Run("URL with credentials and a flag", func(t *testing.T) {
		var f AuthFlags
		f.TokenFile = tok
		if _, err := f.Options("nats://u:p@hub:4222"); err == nil || !strings.Contains(err.Error(), "--nats-url carries credentials") {
			t.Fatalf("got %v", err)
		}
	})

	t.Run("nothing given", func(t *testing.T) {
		f, opts, err := parse(t, nil)
		if err != nil || len(opts) != 0 || f.Any() {
			t.Fatalf("no flags: %d options, any %v, %v", len(opts), f.Any(), err)
		}
	})

	// The flags' options work against the real server: token from a file
	// or the environment, user and password, each over mutual TLS.
	serverCert, _, _ := ca.issue(t, "server")
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	mtls := &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	tlsArgs := []string{"--nats-tls-ca", ca.pemFile, "--nats-tls-cert", crt, "--nats-tls-key", key}
	for name, tc := range map[string]struct {
		sec  *embednats.Security
		env  map[string]string
		args []string
	}{
		"token file":            {&embednats.Security{Token: "s3cr3t", TLS: mtls}, nil, append([]string{"--nats-token-file", tok}, tlsArgs...)},
		"token env":             {&embednats.Security{Token: "s3cr3t", TLS: mtls}, map[string]string{EnvNATSToken: "s3cr3t"}, tlsArgs},
		"user and password env": {&embednats.Security{Users: map[string]string{"agent": "pw"}, TLS: mtls}, map[string]string{EnvNATSUser: "agent", EnvNATSPassword: "pw"}, tlsArgs},
		"user and password file": {&embednats.Security{Users: map[string]string{"agent": "pw"}, TLS: mtls}, map[string]string{EnvNATSTLSCA: ca.pemFile, EnvNATSTLSCert: crt, EnvNATSTLSKey: key},
			[]string{"--nats-user", "agent", "--nats-password-file", pw}},
	} {
		t.Run(name, func(t *testing.T) {
			f, opts, err := parse(t, tc.env, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if !f.Any() {
				t.Error("Any() = false with flags given")
			}
			s := secureServer(t, tc.sec)
			if err := connectAndPublish(t, s.ClientURL(), opts...); err != nil {
				t.Fatal(err)
			}
			// Without the credential (TLS only) the same server refuses.
			noCred := opts[len(opts)-1:]
			if err := connectAndPublish(t, s.ClientURL(), noCred...); err == nil || !strings.Contains(err.Error(), "Authorization Violation") {
				t.Fatalf("TLS alone: %v, want Authorization Violation", err)
			}
		})
	}
}

// TestNKeyEncoding checks the test's own nkey encoding against the client
// library's parser, which the other tests rely on.
func TestAuthNKeyEncoding(t *testing.T) {
	k := newNKey(t, nkeyPrefixUser)
	if !strings.HasPrefix(k.public, "U") || !strings.HasPrefix(k.seed, "SU") {
		t.Fatalf("user key %s / seed %.2s...: wrong prefixes", k.public, k.seed)
	}
	if _, err := nkeyOption(writeFile(t, "k.nk", k.seed)); err != nil {
		t.Fatalf("the client library refuses the seed: %v", err)
	}
	if !bytes.Equal([]byte(k.public[:1]), []byte("U")) || crc16([]byte("123456789")) != 0x31C3 {
		t.Fatal("crc16 is not CRC-16/XMODEM")
	}
}
