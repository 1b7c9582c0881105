package spokeauth

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"

	embedetcd "github.com/meridian-gpu/meridian/internal/embedded/etcd"
	embednats "github.com/meridian-gpu/meridian/internal/embedded/nats"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// The embedded etcd starts once, if a test needs it; each test works under
// its own prefix.
var (
	etcdOnce sync.Once
	etcdSrv  *embedetcd.Server
	etcdStop func()
	etcdErr  error
	etcdCli  *clientv3.Client
)

func TestMain(m *testing.M) {
	code := m.Run()
	if etcdCli != nil {
		_ = etcdCli.Close()
	}
	if etcdStop != nil {
		etcdStop()
	}
	os.Exit(code)
}

// testKV is a fresh, empty etcd key space for one test.
func testKV(t testing.TB) clientv3.KV {
	t.Helper()
	etcdOnce.Do(func() {
		if etcdSrv, etcdStop, etcdErr = embedetcd.StartTemp("spokeauth-etcd-"); etcdErr == nil {
			etcdCli, etcdErr = etcdSrv.InProcessClient()
		}
	})
	if etcdErr != nil {
		t.Fatalf("start embedded etcd: %v", etcdErr)
	}
	return namespace.NewKV(etcdCli.KV, "/test/"+t.Name())
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// env is a hub's side of spoke identity on a real NATS server: the
// authority, the NATS server in operator mode and the hub's own bus.
type env struct {
	t    testing.TB
	kv   clientv3.KV
	auth *Authority
	srv  *embednats.Server
	hub  *natsbus.Bus
}

// hubOpts shortens redelivery so tests that kill a consumer finish soon.
var hubOpts = []natsbus.Option{natsbus.WithAckWait(time.Second), natsbus.WithReconnectWait(20 * time.Millisecond)}

// newEmbeddedEnv runs the hub's embedded mode: generated operator and
// system account, account JWTs preloaded into the server.
func newEmbeddedEnv(t testing.TB) *env {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	e := &env{t: t, kv: testKV(t)}
	var err error
	if e.auth, err = Open(ctx, Config{KV: e.kv, Embedded: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.auth.Close)
	sec, err := e.auth.EmbeddedSecurity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if e.srv, err = embednats.Start(embednats.Config{StoreDir: t.TempDir(), Security: sec}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.srv.Close() })
	e.connectHub(ctx)
	return e
}

func (e *env) connectHub(ctx context.Context) {
	t := e.t
	t.Helper()
	if err := e.auth.Attach(ctx, e.srv.ClientURL(), natsbus.WithReconnectWait(20*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	j, s, err := e.auth.HubUser("meridian-hub test")
	if err != nil {
		t.Fatal(err)
	}
	if e.hub, err = natsbus.Connect(ctx, e.srv.ClientURL(), append(hubOpts, natsbus.WithName("hub"), natsbus.WithUserJWT(j, s))...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.hub.Close)
	if err := e.hub.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.auth.Start(ctx, e.hub); err != nil {
		t.Fatal(err)
	}
}

// register issues cluster a credential and writes it to a .creds file.
func (e *env) register(cluster string, rotate bool) (*Issued, string) {
	e.t.Helper()
	is, err := e.auth.Register(testCtx(e.t, 10*time.Second), cluster, rotate)
	if err != nil {
		e.t.Fatalf("Register(%s, rotate=%v): %v", cluster, rotate, err)
	}
	p := filepath.Join(e.t.TempDir(), cluster+".creds")
	if err := os.WriteFile(p, is.Creds, 0o600); err != nil {
		e.t.Fatal(err)
	}
	return is, p
}

// agentBus connects as cluster's agent does: its credential, its inbox.
func (e *env) agentBus(cluster, credsPath string) *natsbus.Bus {
	e.t.Helper()
	b, err := e.agentBusErr(cluster, credsPath)
	if err != nil {
		e.t.Fatalf("agent %s: %v", cluster, err)
	}
	return b
}

func (e *env) agentBusErr(cluster, credsPath string) (*natsbus.Bus, error) {
	inbox, err := natsbus.ClusterInboxPrefix(cluster)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := natsbus.Connect(ctx, e.srv.ClientURL(), natsbus.WithName("agent "+cluster), natsbus.WithCredsFile(credsPath),
		natsbus.WithInboxPrefix(inbox), natsbus.WithReconnectWait(20*time.Millisecond))
	if err != nil {
		return nil, err
	}
	e.t.Cleanup(b.Close)
	return b, nil
}

// TestIssuedCredentialIsLeastPrivilege checks the user JWT itself: signed
// by the account's signing key, for that account, with exactly the
// agent's permissions, and the seed nowhere in etcd.
func TestIssuedCredentialIsLeastPrivilege(t *testing.T) {
	e := newEmbeddedEnv(t)
	is, _ := e.register("gpu-east", false)
	j, err := jwt.ParseDecoratedJWT(is.Creds)
	if err != nil {
		t.Fatal(err)
	}
	uc, err := jwt.DecodeUserClaims(j)
	if err != nil {
		t.Fatal(err)
	}
	if uc.IssuerAccount != e.auth.Account() || uc.Issuer != e.auth.k.signerPub {
		t.Fatalf("issuer %s for account %s, want the signing key %s of %s", uc.Issuer, uc.IssuerAccount, e.auth.k.signerPub, e.auth.Account())
	}
	want, _ := natsbus.AgentPermissions("gpu-east")
	if got := []string(uc.Pub.Allow); strings.Join(got, " ") != strings.Join(want.Publish, " ") {
		t.Fatalf("publish allow %v, want %v", got, want.Publish)
	}
	if got := []string(uc.Sub.Allow); strings.Join(got, " ") != "_INBOX_gpu-east.> meridian.advert-request.gpu-east" {
		t.Fatalf("subscribe allow %v, want [_INBOX_gpu-east.> meridian.advert-request.gpu-east]", got)
	}
	if is.PublicKey != uc.Subject || is.InboxPrefix != "_INBOX_gpu-east" {
		t.Fatalf("issued %+v does not match the JWT's subject %s", is.Credential, uc.Subject)
	}
	seed, err := nkeys.ParseDecoratedNKey(is.Creds)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := seed.Seed()
	resp, err := e.kv.Get(context.Background(), Prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if strings.Contains(string(kv.Value), string(s)) {
			t.Fatalf("the agent's seed is stored at %s", kv.Key)
		}
	}
	rec, err := e.auth.Get(context.Background(), "gpu-east")
	if err != nil || len(rec.Active()) != 1 || rec.Active()[0].PublicKey != is.PublicKey {
		t.Fatalf("record %+v, %v; want one active credential %s", rec, err, is.PublicKey)
	}
}

func TestRegisterTwiceNeedsRotate(t *testing.T) {
	e := newEmbeddedEnv(t)
	ctx := testCtx(t, 10*time.Second)
	e.register("c1", false)
	if _, err := e.auth.Register(ctx, "c1", false); err == nil || !strings.Contains(err.Error(), ErrExists.Error()) {
		t.Fatalf("second Register = %v, want ErrExists", err)
	}
	if _, err := e.auth.Register(ctx, "c2", true); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Fatalf("rotate of an unknown cluster = %v, want not registered", err)
	}
	if _, err := e.auth.Register(ctx, "bad.id", false); err == nil || !strings.Contains(err.Error(), "cluster") {
		t.Fatalf("Register(bad.id) = %v, want an error naming cluster", err)
	}
	if _, err := e.auth.Revoke(ctx, "c1", "not-a-key"); err == nil || !strings.Contains(err.Error(), "public_key") {
		t.Fatalf("Revoke(not-a-key) = %v, want an error naming public_key", err)
	}
	e.register("c1", true)
	rec, err := e.auth.Get(ctx, "c1")
	if err != nil || len(rec.Active()) != 2 {
		t.Fatalf("after rotate: %+v, %v; want two active credentials", rec, err)
	}
}

// TestKeysSurviveARestart: a second Open on the same etcd uses the same
// keys, so credentials issued before a hub restart stay valid.
func TestKeysSurviveARestart(t *testing.T) {
	kv := testKV(t)
	ctx := testCtx(t, 10*time.Second)
	a1, err := Open(ctx, Config{KV: kv, Embedded: true})
	if err != nil {
		t.Fatal(err)
	}
	a2, err := Open(ctx, Config{KV: kv, Embedded: true})
	if err != nil {
		t.Fatal(err)
	}
	if a1.Account() != a2.Account() || a1.k.signerPub != a2.k.signerPub {
		t.Fatalf("keys changed across Open: %s/%s then %s/%s", a1.Account(), a1.k.signerPub, a2.Account(), a2.k.signerPub)
	}
	p1, _ := a1.op.PublicKey()
	p2, _ := a2.op.PublicKey()
	if p1 != p2 {
		t.Fatalf("operator changed across Open: %s then %s", p1, p2)
	}
}
