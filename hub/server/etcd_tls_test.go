package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/encoding/protojson"

	embednats "github.com/meridian-gpu/meridian/internal/embedded/nats"
	"github.com/meridian-gpu/meridian/internal/testetcd"
	"github.com/meridian-gpu/meridian/internal/testpki"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// mtls is the hub's client side of p: its CA, certificate and key.
func mtls(p *testpki.PKI) EtcdClient {
	return EtcdClient{CAFile: p.CAFile, CertFile: p.ClientCertFile, KeyFile: p.ClientKeyFile}
}

// etcdHubConfig is a hub on the external etcd at endpoint, with embedded
// NATS in a temporary dir unless natsURL is given.
func etcdHubConfig(t *testing.T, id, endpoint string, ec EtcdClient, natsURL string) Config {
	cfg := Config{HubID: id, EtcdEndpoints: []string{endpoint}, EtcdClient: ec, NATSURL: natsURL,
		LeaderTTL: time.Second, SchedulePeriod: 100 * time.Millisecond, Logger: testLogger()}
	if natsURL == "" {
		cfg.DataDir = t.TempDir()
	}
	return cfg
}

// submitAndWait submits a small workload over REST to the hub at base and
// waits until it SUCCEEDED on the agent of cluster east.
func submitAndWait(t *testing.T, base string) {
	t.Helper()
	code, body := post(t, base+"/v1/workloads", `{"queue":"acme/vision","labels":{"meridian.io/sim-duration":"200ms"},
		"podSets":[{"name":"w","replicas":1,"resources":{"gpuMilli":1000,"acceleratorClass":"nvidia-h100-80gb"}}]}`)
	if code != 200 {
		t.Fatalf("submit: %d %s", code, body)
	}
	var sub meridianv1.SubmitWorkloadResponse
	if err := protojson.Unmarshal([]byte(body), &sub); err != nil {
		t.Fatal(err)
	}
	id := sub.GetWorkload().GetId()
	waitFor(t, 20*time.Second, "workload "+id+" SUCCEEDED", func() bool {
		code, body := get(t, base+"/v1/workloads/"+id)
		var w meridianv1.Workload
		return code == 200 && protojson.Unmarshal([]byte(body), &w) == nil && w.GetStatus().GetPhase() == meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED
	})
}

// TestEtcdTLSHubRunsAWorkloadOnExternalEtcdWithClientCertificates runs a
// whole hub against an etcd that serves TLS and requires client
// certificates: a submit goes through the scheduling loop to a real
// agent and comes back SUCCEEDED, the state living in that etcd.
func TestEtcdTLSHubRunsAWorkloadOnExternalEtcdWithClientCertificates(t *testing.T) {
	p := testpki.New(t)
	ext := testetcd.Start(t, testetcd.Options{PKI: p})
	s, _ := runHub(t, etcdHubConfig(t, "hub-tls", ext.Endpoint, mtls(p), ""))
	waitReady(t, s)
	if emb, _ := s.Embedded(); emb {
		t.Fatal("hub runs its own etcd, want the external one")
	}
	base := "http://" + s.Addrs().HTTP
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	defer startEastAgent(t, ctx, s.NATSURL(), 200*time.Millisecond)()
	createAcmeQueues(t, base)
	waitFor(t, 15*time.Second, "cluster east listed", func() bool {
		code, body := get(t, base+"/v1/clusters/east")
		return code == 200 && strings.Contains(body, "CLUSTER_STATE_READY")
	})
	submitAndWait(t, base)

	// The workloads are in the external etcd, under /meridian/.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ext.Endpoint}, DialTimeout: 5 * time.Second, TLS: mustTLS(t, mtls(p))})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	gctx, gcancel := context.WithTimeout(ctx, 5*time.Second)
	defer gcancel()
	resp, err := cli.Get(gctx, "/meridian/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count == 0 {
		t.Fatalf("external etcd holds %v keys under /meridian/ (err %v), want the hub's state", resp, err)
	}
}

func mustTLS(t *testing.T, e EtcdClient) *tls.Config {
	t.Helper()
	c, err := etcdTLSConfig(e, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestEtcdTLSRefusals: a hub that cannot prove itself to the TLS etcd, or
// does not trust it, does not start, and says why in terms of its flags.
func TestEtcdTLSRefusals(t *testing.T) {
	p := testpki.New(t)
	ext := testetcd.Start(t, testetcd.Options{PKI: p})
	other := testpki.New(t) // another CA, which signed neither side
	tests := map[string]struct {
		ec   EtcdClient
		want []string
	}{
		"no client certificate": {EtcdClient{CAFile: p.CAFile},
			[]string{"etcd wants a client certificate", "--etcd-cert-file"}},
		"wrong CA": {EtcdClient{CAFile: other.CAFile, CertFile: p.ClientCertFile, KeyFile: p.ClientKeyFile},
			[]string{"not signed by a CA in --etcd-ca-file"}},
		"client certificate of another CA": {EtcdClient{CAFile: p.CAFile, CertFile: other.ClientCertFile, KeyFile: other.ClientKeyFile},
			[]string{"etcd refused the client certificate of --etcd-cert-file"}},
	}
	// Plaintext to an etcd that serves TLS.
	tests["http endpoint, no TLS settings"] = struct {
		ec   EtcdClient
		want []string
	}{EtcdClient{}, []string{"no answer over plaintext http", "https:// endpoints and --etcd-ca-file"}}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			endpoint := ext.Endpoint
			if !tc.ec.TLS() {
				endpoint = "http://" + strings.TrimPrefix(endpoint, "https://")
			}
			_, err := New(etcdHubConfig(t, "hub-refused", endpoint, tc.ec, ""))
			if err == nil {
				t.Fatal("the hub started, want a refusal")
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q\nwant it to say %q", err, w)
				}
			}
		})
	}
}

// TestEtcdTLSConfigErrorsNameTheFlag: settings that cannot work are
// refused before any connection, by flag.
func TestEtcdTLSConfigErrorsNameTheFlag(t *testing.T) {
	p := testpki.New(t)
	dir := t.TempDir()
	damaged := filepath.Join(dir, "damaged.pem")
	if err := os.WriteFile(damaged, []byte("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	twoLines := filepath.Join(dir, "pw2")
	if err := os.WriteFile(twoLines, []byte("a\nb\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const https, http = "https://127.0.0.1:1", "http://127.0.0.1:1"
	tests := map[string]struct {
		endpoint string
		ec       EtcdClient
		want     string
	}{
		"embedded etcd with TLS":    {"", EtcdClient{CAFile: p.CAFile}, "need --etcd-endpoints"},
		"cert without key":          {https, EtcdClient{CertFile: p.ClientCertFile}, "--etcd-cert-file \"" + p.ClientCertFile + "\" is given without --etcd-key-file"},
		"key without cert":          {https, EtcdClient{KeyFile: p.ClientKeyFile}, "--etcd-key-file"},
		"http endpoint with TLS":    {http, mtls(p), "need https:// endpoints"},
		"bare endpoint with TLS":    {"127.0.0.1:1", mtls(p), "need https:// endpoints"},
		"missing CA":                {https, EtcdClient{CAFile: filepath.Join(dir, "nope.pem")}, "--etcd-ca-file: \"" + filepath.Join(dir, "nope.pem") + "\" does not exist"},
		"CA is a directory":         {https, EtcdClient{CAFile: dir}, "--etcd-ca-file: \"" + dir + "\" is a directory"},
		"damaged CA":                {https, EtcdClient{CAFile: damaged}, "--etcd-ca-file \"" + damaged + "\""},
		"CA without certificate":    {https, EtcdClient{CAFile: garbage}, "no PEM certificate"},
		"missing cert":              {https, EtcdClient{CertFile: filepath.Join(dir, "c"), KeyFile: p.ClientKeyFile}, "--etcd-cert-file: "},
		"key is not a key":          {https, EtcdClient{CertFile: p.ClientCertFile, KeyFile: p.ClientCertFile}, "--etcd-key-file \"" + p.ClientCertFile + "\": no PEM private key"},
		"cert and key do not match": {https, EtcdClient{CertFile: p.ClientCertFile, KeyFile: writeOtherKey(t)}, "do not make a key pair"},
		"password without user":     {https, EtcdClient{PasswordFile: pw}, "needs --etcd-username"},
		"env password without user": {https, EtcdClient{Password: "x"}, "needs --etcd-username"},
		"user without password":     {https, EtcdClient{Username: "meridian"}, "--etcd-username \"meridian\" needs --etcd-password-file or env MERIDIAN_ETCD_PASSWORD"},
		"password twice":            {https, EtcdClient{Username: "meridian", Password: "x", PasswordFile: pw}, "not both"},
		"missing password file":     {https, EtcdClient{Username: "meridian", PasswordFile: filepath.Join(dir, "none")}, "--etcd-password-file: "},
		"two-line password file":    {https, EtcdClient{Username: "meridian", PasswordFile: twoLines}, "more than one line"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := Config{DataDir: t.TempDir(), EtcdClient: tc.ec, Logger: testLogger()}
			if tc.endpoint != "" {
				cfg.EtcdEndpoints = []string{tc.endpoint}
			}
			var err error
			if err = cfg.validate(); err == nil {
				_, err = cfg.EtcdClient.clientConfig(cfg.EtcdEndpoints, testLogger())
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v\nwant one saying %q", err, tc.want)
			}
		})
	}
}

// writeOtherKey writes a key that belongs to no certificate of the test.
func writeOtherKey(t *testing.T) string {
	t.Helper()
	return testpki.New(t).ClientKeyFile
}

// TestEtcdTLSTwoReplicasElectAndTakeOver runs two hub replicas against
// the same TLS etcd and one NATS, as on two machines: one leads, the
// other stands by; the leader stops and the other takes over and
// schedules.
func TestEtcdTLSTwoReplicasElectAndTakeOver(t *testing.T) {
	p := testpki.New(t)
	ext := testetcd.Start(t, testetcd.Options{PKI: p})
	ns, err := embednats.Start(embednats.Config{StoreDir: t.TempDir(), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Close() })
	a, stopA := runHub(t, etcdHubConfig(t, "hub-a", ext.Endpoint, mtls(p), ns.ClientURL()))
	b, stopB := runHub(t, etcdHubConfig(t, "hub-b", ext.Endpoint, mtls(p), ns.ClientURL()))
	waitReady(t, a)
	waitReady(t, b)
	var leader, follower *Server
	stopLeader := stopA
	waitFor(t, 15*time.Second, "one replica leading", func() bool {
		_, la := a.loop.Leading()
		_, lb := b.loop.Leading()
		switch {
		case la && lb:
			t.Fatal("both replicas lead")
		case la:
			leader, follower = a, b
		case lb:
			leader, follower, stopLeader = b, a, stopB
		}
		return la || lb
	})
	// The follower keeps standing by and knows who leads.
	time.Sleep(500 * time.Millisecond)
	if _, lf := follower.loop.Leading(); lf {
		t.Fatal("both replicas lead")
	}
	lctx, lcancel := context.WithTimeout(context.Background(), 5*time.Second)
	id, err := follower.elector.Leader(lctx)
	lcancel()
	if err != nil || id != leader.HubID() {
		t.Fatalf("follower %s sees leader %q (err %v), want %s", follower.HubID(), id, err, leader.HubID())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	defer startEastAgent(t, ctx, ns.ClientURL(), 200*time.Millisecond)()
	createAcmeQueues(t, "http://"+follower.Addrs().HTTP)
	// A submit to the follower is scheduled by the leader.
	submitAndWait(t, "http://"+follower.Addrs().HTTP)

	if err := stopLeader(); err != nil {
		t.Fatalf("leader %s: %v", leader.HubID(), err)
	}
	waitFor(t, 15*time.Second, follower.HubID()+" takes over", func() bool {
		_, ok := follower.loop.Leading()
		return ok
	})
	submitAndWait(t, "http://"+follower.Addrs().HTTP)
}

// TestEtcdTLSClientCertificateReloadedWhenChanged: a rotated client
// certificate is presented on the next connection; a half-written one
// keeps the last good pair.
func TestEtcdTLSClientCertificateReloadedWhenChanged(t *testing.T) {
	a, b := testpki.New(t), testpki.New(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	copyFile(t, a.ClientCertFile, certFile)
	copyFile(t, a.ClientKeyFile, keyFile)
	tc := mustTLS(t, EtcdClient{CertFile: certFile, KeyFile: keyFile})
	issuer := func() string {
		t.Helper()
		c, err := tc.GetClientCertificate(&tls.CertificateRequestInfo{})
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return string(leaf.AuthorityKeyId)
	}
	first := issuer()
	// Half a rotation: the new certificate beside the old key. (The
	// files are looked at no more than once a second.)
	copyFile(t, b.ClientCertFile, certFile)
	time.Sleep(1100 * time.Millisecond)
	if issuer() != first {
		t.Fatal("a certificate that does not match its key was taken")
	}
	copyFile(t, b.ClientKeyFile, keyFile)
	time.Sleep(1100 * time.Millisecond)
	if issuer() == first {
		t.Fatal("the rotated certificate was not picked up")
	}
}

// TestEtcdTLSCABundleReloadedWhenChanged: the hub's etcd handshakes trust
// the CA bundle as the file holds it now: a hub given the wrong bundle
// connects once the file holds the right one.
func TestEtcdTLSCABundleReloadedWhenChanged(t *testing.T) {
	p, other := testpki.New(t), testpki.New(t)
	x := testetcd.Start(t, testetcd.Options{PKI: p})
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	copyFile(t, other.CAFile, caFile)
	tc, ca, err := etcdTLS(EtcdClient{CAFile: caFile, CertFile: p.ClientCertFile, KeyFile: p.ClientKeyFile}, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	creds := &reloadingTLS{TransportCredentials: credentials.NewTLS(tc), base: tc, ca: ca}
	host := strings.TrimPrefix(x.Endpoint, "https://")
	handshake := func() error {
		t.Helper()
		conn, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		tlsConn, _, err := creds.Clone().ClientHandshake(ctx, host, conn)
		if err == nil {
			tlsConn.Close()
		}
		return err
	}
	if err := handshake(); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("handshake with the wrong CA bundle: %v, want unknown authority", err)
	}
	copyFile(t, p.CAFile, caFile)
	time.Sleep(1100 * time.Millisecond) // the file is looked at once a second at most
	if err := handshake(); err != nil {
		t.Fatalf("handshake after the bundle changed: %v", err)
	}
	// The hub's own client uses these credentials: one that started with
	// the wrong bundle gets through once the file holds the right one.
	copyFile(t, other.CAFile, caFile)
	ecfg, err := EtcdClient{CAFile: caFile, CertFile: p.ClientCertFile, KeyFile: p.ClientKeyFile}.clientConfig([]string{x.Endpoint}, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	sctx, scancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err = cli.Get(sctx, "/meridian/x")
	scancel()
	if err == nil {
		t.Fatal("the client got through with the wrong CA bundle")
	}
	copyFile(t, p.CAFile, caFile)
	gctx, gcancel := context.WithTimeout(context.Background(), 20*time.Second)
	_, err = cli.Get(gctx, "/meridian/x")
	gcancel()
	if err != nil {
		t.Fatalf("the client did not get through after the bundle changed: %v", err)
	}
	// A damaged bundle keeps the last good one.
	if err := os.WriteFile(caFile, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	if err := handshake(); err != nil {
		t.Fatalf("handshake after the bundle was damaged: %v", err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
