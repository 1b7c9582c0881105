package spokeauth

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	embednats "github.com/meridian-gpu/meridian/internal/embedded/nats"
)

// externalNATS starts a NATS server set up as an operator sets up a
// production one with nsc: it trusts an operator that has a signing key,
// knows only the system account, and runs the full (directory) resolver,
// which stores the accounts that system users push. It returns the
// operator's signing key and a system user's .creds file, what the hub is
// given.
func externalNATS(t *testing.T) (*embednats.Server, nkeys.KeyPair, string) {
	t.Helper()
	op, _ := nkeys.CreateOperator()
	opSigner, _ := nkeys.CreateOperator()
	sys, _ := nkeys.CreateAccount()
	sysPub, _ := sys.PublicKey()
	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = "SYS"
	sysJWT, err := sc.Encode(opSigner)
	if err != nil {
		t.Fatal(err)
	}
	opPub, _ := op.PublicKey()
	signerPub, _ := opSigner.PublicKey()
	oc := jwt.NewOperatorClaims(opPub)
	oc.SigningKeys.Add(signerPub)
	opJWT, err := oc.Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := embednats.Start(embednats.Config{StoreDir: t.TempDir(), Security: &embednats.Security{
		// The server trusts the operator (and so its signing key, which
		// signs the account JWTs, as nsc does).
		OperatorJWTs:  []string{opJWT},
		AccountJWTs:   map[string]string{sysPub: sysJWT},
		SystemAccount: sysPub,
		ResolverDir:   t.TempDir(),
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	u, _ := nkeys.CreateUser()
	uPub, _ := u.PublicKey()
	uc := jwt.NewUserClaims(uPub)
	uj, err := uc.Encode(sys)
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := u.Seed()
	creds, _ := jwt.FormatUserConfig(uj, seed)
	p := filepath.Join(t.TempDir(), "sys.creds")
	if err := os.WriteFile(p, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	return srv, opSigner, p
}

// TestExternalNATS: against a NATS the hub does not run, the hub pushes
// its account at Attach, issues least-privilege credentials there, and a
// revocation reaches the server through the system account.
func TestExternalNATS(t *testing.T) {
	srv, opSigner, sysCreds := externalNATS(t)
	ctx := testCtx(t, 60*time.Second)
	e := &env{t: t, kv: testKV(t), srv: srv}
	var err error
	if e.auth, err = Open(ctx, Config{KV: e.kv, OperatorSigner: opSigner, SystemCredsFile: sysCreds}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.auth.Close)
	e.connectHub(ctx)
	_, credsA := e.register("a", false)
	_, credsB := e.register("b", false)
	agentA := e.agentBus("a", credsA)
	agentB := e.agentBus("b", credsB)
	if _, err := agentA.PublishEvent(ctx, "a", "ev-1", []byte("x")); err != nil {
		t.Fatalf("A's event: %v", err)
	}
	if _, err := e.auth.Revoke(ctx, "a", ""); err != nil {
		t.Fatal(err)
	}
	waitDisconnected(t, agentA, 5*time.Second)
	if _, err := agentB.PublishEvent(ctx, "b", "ev-2", []byte("x")); err != nil {
		t.Fatalf("B's event after A's revocation: %v", err)
	}

	// A restarted hub (a new Authority on the same etcd) pushes the same
	// account with the revocation, and A stays out.
	e.auth.Close()
	a2, err := Open(ctx, Config{KV: e.kv, OperatorSigner: opSigner, SystemCredsFile: sysCreds})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a2.Close)
	if err := a2.Attach(ctx, srv.ClientURL()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.agentBusErr("a", credsA); err == nil {
		t.Fatal("A's revoked credential connects after the hub's restart")
	}
	if _, err := e.agentBusErr("b", credsB); err != nil {
		t.Fatalf("B's credential after the hub's restart: %v", err)
	}
}

func TestOpenRefusesBadExternalConfig(t *testing.T) {
	kv := testKV(t)
	ctx := testCtx(t, 10*time.Second)
	acc, _ := nkeys.CreateAccount()
	op, _ := nkeys.CreateOperator()
	for name, tc := range map[string]struct {
		cfg  Config
		want string
	}{
		"no KV":           {Config{Embedded: true}, "Config.KV"},
		"no signer":       {Config{KV: kv, SystemCredsFile: "x"}, "Config.OperatorSigner"},
		"account signer":  {Config{KV: kv, OperatorSigner: acc, SystemCredsFile: "x"}, "OperatorSigner is a account key"},
		"no system creds": {Config{KV: kv, OperatorSigner: op}, "Config.SystemCredsFile"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Open(ctx, tc.cfg); err == nil || !contains(err.Error(), tc.want) {
				t.Fatalf("Open = %v, want an error with %q", err, tc.want)
			}
		})
	}
}
