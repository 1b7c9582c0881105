package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/internal/testoidc"
	"github.com/meridian-gpu/meridian/internal/testpki"
)

func TestParseAuthorization(t *testing.T) {
	tests := map[string]struct {
		header, token, reason string
	}{
		"bearer":             {"Bearer abc.def-ghi_jkl~mno+pqr/stu==", "abc.def-ghi_jkl~mno+pqr/stu==", ""},
		"scheme any case":    {"bEaReR tok", "tok", ""},
		"empty":              {"", "", "no credentials"},
		"bearer nothing":     {"Bearer", "", "empty bearer token"},
		"bearer space":       {"Bearer ", "", "empty bearer token"},
		"two spaces":         {"Bearer  tok", "", "malformed"},
		"trailing space":     {"Bearer tok ", "", "malformed"},
		"basic":              {"Basic YWxpY2U6c2VjcmV0", "", "unsupported authorization scheme"},
		"token without type": {"abc.def.ghi", "", "unsupported authorization scheme"},
		"garbage":            {"%%%", "", "unsupported authorization scheme"},
		"secret as scheme":   {"s3cretvalue123 x", "", "unsupported authorization scheme"},
		"non ascii":          {"Bearer tök", "", "malformed"},
		"control":            {"Bearer a\tb", "", "malformed"},
		"newline":            {"Bearer a\nb", "", "malformed"},
		"nul":                {"Bearer a\x00", "", "malformed"},
		"invalid utf8":       {"Bearer \xff\xfe", "", "malformed"},
		"equals inside":      {"Bearer a=b", "", "malformed"},
		"only equals":        {"Bearer ==", "", "malformed"},
		"oversized":          {"Bearer " + strings.Repeat("a", MaxAuthorizationLen), "", "too large"},
		"largest accepted":   {"Bearer " + strings.Repeat("a", MaxAuthorizationLen-7), strings.Repeat("a", MaxAuthorizationLen-7), ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tok, err := ParseAuthorization(tc.header)
			if tc.reason == "" {
				if err != nil || tok != tc.token {
					t.Fatalf("= %q, %v; want %q", tok, err, tc.token)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, token %q", tok)
			}
			mustUnauth(t, err, tc.reason, strings.TrimPrefix(tc.header, "Bearer "))
		})
	}
	_, err := Credentials{MultipleAuthorization: true}.BearerToken()
	mustUnauth(t, err, "more than one", "")
	if _, err := ParseAuthorization(""); !IsNoCredentials(err) {
		t.Fatalf("empty header: %v, want ErrNoCredentials", err)
	}
	if _, err := ParseAuthorization("Basic x"); IsNoCredentials(err) {
		t.Fatal("a bad header is not 'no credentials'")
	}
}

// leafCert makes a certificate for the mapping tests, signed by a fresh CA.
func leafCert(t testing.TB, cn string, orgs []string, notAfter time.Time) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCertsMapping(t *testing.T) {
	exp := time.Now().Add(time.Hour).Truncate(time.Second)
	c := NewCerts(CertOptions{UserPrefix: "cert:", GroupsPrefix: "cert:"})
	ctx := testCtx(t)
	chain := func(cert *x509.Certificate) Credentials {
		return Credentials{VerifiedChains: [][]*x509.Certificate{{cert}}}
	}
	p, err := c.Authenticate(ctx, chain(leafCert(t, "spoke-eu1", []string{"spokes", "eu"}, exp)))
	// DER sorts the Organization set: eu before spokes.
	want := &Principal{User: "cert:spoke-eu1", Groups: []string{"cert:eu", "cert:spokes"}, Method: MethodCert, ExpiresAt: exp}
	if err != nil || !principalEqual(p, want) {
		t.Fatalf("= %+v, %v; want %+v", p, err, want)
	}
	_, err = c.Authenticate(ctx, chain(leafCert(t, "", []string{"x"}, exp)))
	mustUnauth(t, err, "common name", "")
	_, err = c.Authenticate(ctx, chain(leafCert(t, "a\x01b", nil, exp)))
	mustUnauth(t, err, "common name", "")
	_, err = c.Authenticate(ctx, chain(leafCert(t, "old", nil, time.Now().Add(-time.Minute))))
	mustUnauth(t, err, "expired", "")
	for name, cr := range map[string]Credentials{
		"no chain":      {},
		"empty chain":   {VerifiedChains: [][]*x509.Certificate{{}}},
		"with a header": {Authorization: "Bearer x", VerifiedChains: [][]*x509.Certificate{{leafCert(t, "a", nil, exp)}}},
	} {
		if _, err := c.Authenticate(ctx, cr); !errors.Is(err, ErrNotApplicable) {
			t.Errorf("%s: %v, want not applicable", name, err)
		}
	}
}

// Only chains the TLS layer verified reach the mapping: a real mTLS
// handshake with a certificate of the trusted CA yields VerifiedChains and
// a principal; a certificate of another CA is refused by the handshake
// itself, and under RequestClientCert (no verification) it shows up only in
// PeerCertificates, which Credentials has no field for.
func TestCertsOnlyVerifiedChains(t *testing.T) {
	trusted, other := testpki.New(t), testpki.New(t)
	handshake := func(auth tls.ClientAuthType, clientPKI *testpki.PKI) (tls.ConnectionState, error) {
		cert, err := tls.LoadX509KeyPair(clientPKI.ClientCertFile, clientPKI.ClientKeyFile)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{trusted.Server},
			ClientAuth: auth, ClientCAs: trusted.Pool, MinVersion: tls.VersionTLS13})
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		type result struct {
			st  tls.ConnectionState
			err error
		}
		ch := make(chan result, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				ch <- result{err: err}
				return
			}
			defer c.Close()
			tc := c.(*tls.Conn)
			err = tc.Handshake()
			ch <- result{tc.ConnectionState(), err}
		}()
		cc, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: trusted.Pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
		if err == nil {
			_, _ = cc.Read(make([]byte, 1)) // TLS 1.3: the server's verdict arrives after the client's handshake
			cc.Close()
		}
		r := <-ch
		return r.st, r.err
	}
	certs := NewCerts(CertOptions{})
	ctx := testCtx(t)

	st, err := handshake(tls.RequireAndVerifyClientCert, trusted)
	if err != nil {
		t.Fatalf("trusted client: %v", err)
	}
	p, err := certs.Authenticate(ctx, Credentials{VerifiedChains: st.VerifiedChains, RemoteAddr: &net.TCPAddr{}})
	if err != nil || p.User != "client" || p.Method != MethodCert {
		t.Fatalf("trusted client: %+v, %v", p, err)
	}

	if _, err := handshake(tls.RequireAndVerifyClientCert, other); err == nil {
		t.Fatal("the TLS layer accepted a client certificate of another CA")
	}

	st, err = handshake(tls.RequestClientCert, other)
	if err != nil {
		t.Fatalf("unverified request: %v", err)
	}
	if len(st.PeerCertificates) == 0 || len(st.VerifiedChains) != 0 {
		t.Fatalf("want peer certificates without verified chains, got %d / %d", len(st.PeerCertificates), len(st.VerifiedChains))
	}
	_, err = NewChain(certs).Authenticate(ctx, Credentials{VerifiedChains: st.VerifiedChains})
	if !IsNoCredentials(err) {
		t.Fatalf("unverified certificate: err = %v, want no credentials", err)
	}
}

// The chain: header first and alone, certificate without a header,
// distinct "no credentials", and None.
func TestChain(t *testing.T) {
	iss := testoidc.New(t)
	o := newOIDC(t, nil, iss)
	tk := newTokens(t, nil, nil)
	certs := NewCerts(CertOptions{})
	chain := NewChain(o, tk, certs, nil)
	ctx := testCtx(t)
	cert := [][]*x509.Certificate{{leafCert(t, "spoke", nil, time.Now().Add(time.Hour))}}
	jwt := iss.Token(t, iss.Claims(aud, "alice"), nil)
	api := tk.issue(t, IssueRequest{Name: "ci", User: "bot"}).Reveal()

	for name, tc := range map[string]struct {
		cr     Credentials
		user   string
		method Method
	}{
		"oidc":              {bearer(jwt), "alice", MethodOIDC},
		"api token":         {bearer(api), "bot", MethodToken},
		"cert":              {Credentials{VerifiedChains: cert}, "spoke", MethodCert},
		"header beats cert": {Credentials{Authorization: "Bearer " + jwt, VerifiedChains: cert}, "alice", MethodOIDC},
	} {
		p, err := chain.Authenticate(ctx, tc.cr)
		if err != nil || p.User != tc.user || p.Method != tc.method {
			t.Errorf("%s: %+v, %s", name, p, AuditDetail(err))
		}
	}
	for name, tc := range map[string]struct {
		cr     Credentials
		reason string
	}{
		"bad token never falls back to the cert": {Credentials{Authorization: "Bearer " + jwt + "x", VerifiedChains: cert}, "invalid token"},
		"malformed header with a cert":           {Credentials{Authorization: "Basic abc", VerifiedChains: cert}, "unsupported"},
		"opaque token":                           {bearer("opaque"), "not recognized"},
		"several headers":                        {Credentials{MultipleAuthorization: true}, "more than one"},
		"oversized":                              {bearer(strings.Repeat("a", MaxAuthorizationLen)), "too large"},
	} {
		_, err := chain.Authenticate(ctx, tc.cr)
		if err == nil || !IsUnauthenticated(err) || IsNoCredentials(err) || !strings.Contains(ClientReason(err), tc.reason) {
			t.Errorf("%s: err = %v, want unauthenticated saying %q", name, err, tc.reason)
		}
	}
	_, err := chain.Authenticate(ctx, Credentials{})
	if !IsNoCredentials(err) || !IsUnauthenticated(err) || !strings.Contains(ClientReason(err), "bearer token") {
		t.Fatalf("no credentials: %v", err)
	}
	_, err = NewChain(o).Authenticate(ctx, Credentials{VerifiedChains: cert})
	if !IsUnauthenticated(err) || IsNoCredentials(err) {
		t.Fatalf("cert with cert auth off: %v", err)
	}

	p, err := NewChain(None{}).Authenticate(ctx, bearer("whatever"))
	if err != nil || p.User != NoneUser || !slices.Equal(p.Groups, []string{NoneGroup}) || p.Method != MethodNone {
		t.Fatalf("none: %+v, %v", p, err)
	}
}

func TestPrincipalContext(t *testing.T) {
	ctx := testCtx(t)
	if _, ok := PrincipalFrom(ctx); ok {
		t.Fatal("principal in an empty context")
	}
	p := &Principal{User: "alice", Groups: []string{"a"}}
	got, ok := PrincipalFrom(WithPrincipal(ctx, p))
	if !ok || got != p {
		t.Fatalf("PrincipalFrom = %v, %v", got, ok)
	}
	if _, ok := PrincipalFrom(WithPrincipal(ctx, nil)); ok {
		t.Fatal("nil principal reported present")
	}
	c := p.Clone()
	c.Groups[0] = "b"
	if p.Groups[0] != "a" {
		t.Fatal("Clone shares Groups")
	}
}
