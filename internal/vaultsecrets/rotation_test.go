package vaultsecrets_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-gpu/meridian/connectors/simcluster"
	embednats "github.com/meridian-gpu/meridian/internal/embedded/nats"
	"github.com/meridian-gpu/meridian/internal/vaultlocal"
	"github.com/meridian-gpu/meridian/internal/vaultsecrets"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// envDuration reads a test knob (a Go duration) or returns def.
func envDuration(t testing.TB, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive Go duration", name, v)
	}
	return d
}

const rotationCluster = `
fractionalModes: [mps]
defaultDuration: 1h
nodes:
  - name: gpu
    count: 64
    gpus: 8
    acceleratorClass: nvidia-a100-40gb
    gpuMemoryMiB: 40960
    cpuMilli: 256000
    memoryMiB: 1048576
    rack: r1
`

func rotationDispatch(id string) *agentv1.HubMessage {
	wl := &meridianv1.Workload{Id: "wl-" + id, Queue: "t/a", PodSets: []*meridianv1.PodSet{{
		Name: "main", Replicas: 1, Resources: &meridianv1.Resources{GpuMilli: 1000, CpuMilli: 1000, MemoryMib: 1024},
	}}}
	return &agentv1.HubMessage{Kind: &agentv1.HubMessage_Dispatch{Dispatch: &agentv1.Dispatch{
		DispatchId: id, WorkloadId: wl.Id, Attempt: 1, Workload: wl, ClusterId: "east",
	}}}
}

// TestVaultPKIRotationUnderLoad: the agent's NATS client certificate
// comes from Vault PKI with a short TTL (MERIDIAN_VAULT_TEST_CERT_TTL,
// default 30s); its key is made locally and only a CSR is sent. While
// dispatches flow at a steady rate, the certificate is renewed at two
// thirds of its life at least twice, and each renewal reconnects NATS
// with the new certificate. No dispatch is lost (each gets its ACCEPTED
// or RUNNING event) and none is launched twice (the cluster counts one launch per
// dispatch).
func TestVaultPKIRotationUnderLoad(t *testing.T) {
	ttl := envDuration(t, "MERIDIAN_VAULT_TEST_CERT_TTL", 30*time.Second)
	srv := vaultlocal.Start(t)
	root := rootClient(t, srv)
	caPEM := setupPKI(t, root)
	roleFile, secretFile := setupAppRole(t, root, "role-east", "secret-east", time.Hour, 24*time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	m, err := vaultsecrets.New(ctx, vaultsecrets.Config{Addr: srv.Addr, Auth: vaultsecrets.AuthAppRole, RoleIDFile: roleFile, SecretIDFile: secretFile,
		Backoff: vaultsecrets.Backoff{Base: 100 * time.Millisecond, Max: time.Second}}, vaultsecrets.WithLogger(testLogger()))
	must(t, err)
	go m.Run(ctx)
	src, err := m.NewCertSource(vaultsecrets.PKIConfig{Name: "nats-client-cert", Mount: "pki", Role: "meridian-agent", CommonName: "east.agents.meridian", TTL: ttl})
	must(t, err)
	must(t, src.Fetch(ctx))
	first := src.Certificate()
	if !issuedBy(t, first, caPEM) {
		t.Fatal("the certificate does not chain to the Vault CA")
	}
	if got := first.Leaf.NotAfter.Sub(time.Now()); got > ttl+time.Second || got < ttl-10*time.Second {
		t.Fatalf("certificate lives %s, want about %s", got, ttl)
	}

	ns := startNATS(t, &embednats.Security{TLS: &tls.Config{Certificates: []tls.Certificate{issueServerCert(t, root)},
		ClientCAs: certPool(t, caPEM), ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}})
	caFile := writeFile(t, "ca.pem", caPEM)

	// The agent presents the Vault certificate at each handshake; record
	// which one.
	var presented atomic.Pointer[x509.Certificate]
	getCert := func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
		c, err := src.GetClientCertificate(cri)
		if err == nil {
			presented.Store(c.Leaf)
		}
		return c, err
	}
	abus, err := natsbus.Connect(ctx, ns.ClientURL(), natsbus.WithClientCertificateFunc(caFile, getCert),
		natsbus.WithReconnectWait(50*time.Millisecond), natsbus.WithNakBackoff(50*time.Millisecond, 200*time.Millisecond),
		natsbus.WithLogger(testLogger()))
	must(t, err)
	defer abus.Close()
	var rotations atomic.Int32
	src.OnRotate(func(*tls.Certificate) {
		rotations.Add(1)
		if err := abus.Conn().ForceReconnect(); err != nil {
			t.Errorf("reconnect after rotation: %v", err)
		}
	})
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	go src.Run(rctx)

	// The hub side: a long-lived certificate of the same role.
	hubSrc, err := m.NewCertSource(vaultsecrets.PKIConfig{Name: "hub-cert", Mount: "pki", Role: "meridian-agent", CommonName: "hub.meridian", TTL: time.Hour})
	must(t, err)
	must(t, hubSrc.Fetch(ctx))
	hub, err := natsbus.Connect(ctx, ns.ClientURL(), natsbus.WithClientCertificateFunc(caFile, hubSrc.GetClientCertificate))
	must(t, err)
	defer hub.Close()
	must(t, hub.EnsureStreams(ctx))
	var mu sync.Mutex
	accepted, rejected := map[string]int{}, map[string]int{}
	_, err = hub.ConsumeEvents(ctx, func(_ context.Context, d natsbus.Delivery) error {
		var ev agentv1.DispatchEvent
		if err := proto.Unmarshal(d.Payload, &ev); err != nil {
			return natsbus.Permanent(err)
		}
		mu.Lock()
		switch ev.Type {
		// RUNNING may be stored in place of ACCEPTED (spoke-agent).
		case agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_ACCEPTED, agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_RUNNING:
			accepted[ev.DispatchId]++
		case agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_REJECTED:
			rejected[ev.DispatchId]++
		}
		mu.Unlock()
		return nil
	})
	must(t, err)

	cfg, err := simcluster.ParseConfig([]byte(rotationCluster))
	must(t, err)
	sim, err := simcluster.New(cfg, simcluster.Options{})
	must(t, err)
	defer sim.Close()
	a, err := agent.New(agent.Config{ClusterID: "east", Bus: abus, Connector: sim, Logger: testLogger(),
		HeartbeatInterval: 200 * time.Millisecond, RegisterTimeout: 300 * time.Millisecond, AnswerTimeout: 5 * time.Second})
	must(t, err)
	agentDone := make(chan error, 1)
	go func() { agentDone <- a.Run(rctx) }()

	// Load: a dispatch every 100ms until two renewals have happened and a
	// little after.
	n := 0
	loadUntil := time.Now().Add(ttl*2/3*2 + ttl/4)
	for time.Now().Before(loadUntil) || rotations.Load() < 2 {
		if time.Now().After(loadUntil.Add(ttl)) {
			t.Fatalf("%d renewals in %s with a %s certificate, want 2", rotations.Load(), time.Since(loadUntil.Add(-ttl*2/3*2-ttl/4)), ttl)
		}
		id := fmt.Sprintf("d-%04d", n)
		b, _ := proto.Marshal(rotationDispatch(id))
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		if _, err := hub.PublishDispatch(pctx, "east", id, b); err != nil {
			t.Fatalf("publish %s: %v", id, err)
		}
		pcancel()
		n++
		time.Sleep(100 * time.Millisecond)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		got := len(accepted) + len(rejected)
		mu.Unlock()
		if got == n {
			break
		}
		if time.Now().After(deadline) {
			mu.Lock()
			var missing []string
			for i := range n {
				if id := fmt.Sprintf("d-%04d", i); accepted[id]+rejected[id] == 0 {
					missing = append(missing, id)
				}
			}
			mu.Unlock()
			t.Fatalf("%d of %d dispatches answered after the load (%d launched); unanswered: %v", got, n, sim.Launches(), missing)
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(rejected) != 0 {
		t.Errorf("%d dispatches rejected: %v", len(rejected), rejected)
	}
	if got := sim.Launches(); got != n {
		t.Errorf("%d launches for %d dispatches: a dispatch was lost or launched twice", got, n)
	}
	if sim.Running() != n {
		t.Errorf("%d running, want %d (work was dropped)", sim.Running(), n)
	}
	cur := src.Certificate().Leaf
	if cur.SerialNumber.Cmp(first.Leaf.SerialNumber) == 0 {
		t.Fatal("the certificate was never renewed")
	}
	if p := presented.Load(); p == nil || p.SerialNumber.Cmp(cur.SerialNumber) != 0 {
		t.Errorf("the connection presents serial %s, want the renewed %s", fmtSerial(p), fmtSerial(cur))
	}
	if r := abus.Conn().Stats().Reconnects; r < 2 {
		t.Errorf("%d reconnects, want one per renewal (%d)", r, rotations.Load())
	}
	t.Logf("%d dispatches, %d renewals of a %s certificate, %d reconnects, 0 lost, 0 relaunched", n, rotations.Load(), ttl, abus.Conn().Stats().Reconnects)
	rcancel()
	if err := <-agentDone; err != nil {
		t.Errorf("agent Run: %v", err)
	}
}
