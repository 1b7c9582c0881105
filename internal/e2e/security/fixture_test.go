package security

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-gpu/meridian/hub/api"
	"github.com/meridian-gpu/meridian/hub/auth"
	"github.com/meridian-gpu/meridian/hub/authz"
	"github.com/meridian-gpu/meridian/hub/server"
	"github.com/meridian-gpu/meridian/hub/store"
	"github.com/meridian-gpu/meridian/internal/testoidc"
	"github.com/meridian-gpu/meridian/internal/tlsreload"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// audience is the OIDC client id the hub accepts.
const audience = "meridian"

// accelClass is the accelerator class of every quota and workload here.
const accelClass = "nvidia-h100-80gb"

// permissions is the hub's authorization section: which groups hold which
// global permissions.
func permissions() authz.Config {
	return authz.Config{GroupPermissions: map[string][]string{
		"platform-admins": {string(authz.PermAdmin)},
		"a-admins":        {string(authz.PermTokensCreate)},
		"b-admins":        {string(authz.PermTokensCreate)},
		"platform":        {string(authz.PermQueuesCreate)},
		"auditors":        {string(authz.PermAuditRead)},
	}}
}

// fixture is one running hub with authentication on, and what a test
// needs to reach it as anyone.
type fixture struct {
	srv      *server.Server
	dir      string
	grpcAddr string
	restBase string // https://127.0.0.1:port

	ca                        *testCA
	certFile, keyFile, caFile string
	iss                       *testoidc.Issuer
	adminToken                string // the bootstrap admin API token
	pool                      *x509.CertPool
	conn                      *grpc.ClientConn // TLS, no client certificate
	http                      *http.Client     // TLS, no client certificate
	etcd                      *clientv3.Client
	auditFile                 string
	logs                      *lockedBuffer // the hub's logs, at debug level
	reqSeq                    atomic.Int64
	wl                        meridianv1.WorkloadServiceClient
	q                         meridianv1.QueueServiceClient
	adm                       meridianv1.AdminServiceClient
}

// startHub runs a hub on loopback for t and stops it at t's cleanup.
func startHub(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir()}
	f.ca = newTestCA(t, "meridian-test-ca")
	f.pool = x509.NewCertPool()
	f.pool.AddCert(f.ca.cert)
	f.certFile, f.keyFile = filepath.Join(f.dir, "hub.crt"), filepath.Join(f.dir, "hub.key")
	f.writeServerCert(t, 100)
	f.caFile = filepath.Join(f.dir, "client-ca.pem")
	if err := os.WriteFile(f.caFile, f.ca.certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	f.iss = testoidc.New(t)
	f.auditFile = filepath.Join(f.dir, "audit.jsonl")
	f.logs = &lockedBuffer{}
	srv, err := server.New(server.Config{
		DataDir: filepath.Join(f.dir, "data"), HubID: "security", Version: "test", UnsafeNoFsync: true,
		Logger:    slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		LeaderTTL: time.Second, SchedulePeriod: 200 * time.Millisecond,
		// The cluster credential RPCs answer only where the hub issues
		// NATS credentials.
		SpokeAuth: &server.SpokeAuth{},
		Security: server.Security{
			Mode:           server.AuthOn,
			OIDC:           []auth.IssuerConfig{{IssuerURL: f.iss.URL, Audience: audience, RootCAs: f.iss.CAPool}},
			Authorization:  permissions(),
			TLS:            tlsreload.Files{CertFile: f.certFile, KeyFile: f.keyFile, ClientCAFile: f.caFile},
			AuditFile:      f.auditFile,
			AdminTokenFile: filepath.Join(f.dir, "admin-token"),
		},
	})
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	f.srv = srv
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		if f.conn != nil {
			f.conn.Close()
		}
		if f.etcd != nil {
			f.etcd.Close()
		}
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Errorf("the hub did not stop within 20s")
		}
		_ = srv.Close()
	})
	f.grpcAddr = srv.Addrs().GRPC
	f.restBase = "https://" + srv.Addrs().HTTP
	tok, err := os.ReadFile(filepath.Join(f.dir, "admin-token"))
	if err != nil {
		t.Fatalf("the hub wrote no admin token: %v", err)
	}
	f.adminToken = strings.TrimSpace(string(tok))
	if !strings.HasPrefix(f.adminToken, auth.TokenPrefix) {
		t.Fatalf("the admin token file does not hold an API token")
	}
	f.http = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: f.pool}}, Timeout: 30 * time.Second}
	f.waitReady(t)
	f.conn, err = grpc.NewClient(f.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: f.pool})))
	if err != nil {
		t.Fatal(err)
	}
	f.wl = meridianv1.NewWorkloadServiceClient(f.conn)
	f.q = meridianv1.NewQueueServiceClient(f.conn)
	f.adm = meridianv1.NewAdminServiceClient(f.conn)
	f.etcd, err = clientv3.New(clientv3.Config{Endpoints: srv.EtcdEndpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// lockedBuffer collects the hub's logs; safe for concurrent writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitReady polls /readyz over TLS, at most 30 s.
func (f *fixture) waitReady(t testing.TB) {
	t.Helper()
	var last string
	for i := 0; i < 300; i++ {
		resp, err := f.http.Get(f.restBase + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, b)
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("hub not ready after 30s: %s", last)
}

// writeServerCert issues a new server certificate with serial and writes
// it over the hub's certificate files (key first, then certificate, each
// renamed into place).
func (f *fixture) writeServerCert(t testing.TB, serial int64) {
	t.Helper()
	certPEM, keyPEM := f.ca.issue(t, serial, "hub", nil, true)
	writeAtomic(t, f.keyFile, keyPEM)
	writeAtomic(t, f.certFile, certPEM)
}

func writeAtomic(t testing.TB, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// --- credentials -----------------------------------------------------------

// cred is what a caller presents: an Authorization header value ("" for
// none) and, over TLS, optionally a client certificate.
type cred struct {
	name   string
	header string
	user   string // the user the hub should see; "" when unauthenticated
}

func bearer(tok string) string { return "Bearer " + tok }

// oidcToken mints a valid ID token for user in groups.
func (f *fixture) oidcToken(t testing.TB, user string, groups ...string) string {
	t.Helper()
	c := f.iss.Claims(audience, user)
	if len(groups) > 0 {
		c["groups"] = groups
	}
	return f.iss.Token(t, c, nil)
}

func (f *fixture) oidcCred(t testing.TB, user string, groups ...string) cred {
	return cred{name: user, header: bearer(f.oidcToken(t, user, groups...)), user: user}
}

func (f *fixture) adminCred() cred {
	return cred{name: "admin", header: bearer(f.adminToken), user: "bootstrap-admin"}
}

// nextRequestID is a unique x-request-id, to find a request's audit event.
func (f *fixture) nextRequestID(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano(), f.reqSeq.Add(1))
}

// ctx returns a context with c's credentials and a request id.
func withCred(ctx context.Context, c cred, requestID string) context.Context {
	kv := []string{}
	if c.header != "" {
		kv = append(kv, "authorization", c.header)
	}
	if requestID != "" {
		kv = append(kv, "x-request-id", requestID)
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// invoke calls a unary method over gRPC as c.
func (f *fixture) invoke(c cred, method string, req, resp proto.Message, requestID string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return f.conn.Invoke(withCred(ctx, c, requestID), method, req, resp)
}

// restResult is one REST answer.
type restResult struct {
	status int
	body   []byte
}

// rest sends one REST request as c; body is a proto message (protojson),
// raw JSON bytes, or nil.
func (f *fixture) rest(t testing.TB, client *http.Client, c cred, method, path string, body any, requestID string) restResult {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case proto.Message:
		j, err := protojson.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, f.restBase+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.header != "" {
		req.Header.Set("Authorization", c.header)
	}
	if requestID != "" {
		req.Header.Set("X-Request-Id", requestID)
	}
	if client == nil {
		client = f.http
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return restResult{status: resp.StatusCode, body: b}
}

// httpStatus is the REST status of a gRPC code, as the gateway maps it.
func httpStatus(c codes.Code) int { return runtime.HTTPStatusFromCode(c) }

// restError is the gateway's error body.
type restError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func decodeRESTError(b []byte) restError {
	var e restError
	_ = json.Unmarshal(b, &e)
	return e
}

// --- state -------------------------------------------------------------------

// snapshot reads the hub's durable state a request could change: queues,
// workloads (spec and phase: the scheduler may rewrite pending reasons),
// API tokens (less their last-use time), clusters and idempotency keys.
func (f *fixture) snapshot(t testing.TB) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := f.etcd.Get(ctx, store.Root+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		switch {
		case strings.HasPrefix(k, store.Prefix(store.KindWorkloads)):
			w, err := api.DecodeWorkloadRecord(kv.Value)
			if err != nil {
				out[k] = "undecodable"
				continue
			}
			phase := w.GetStatus().GetPhase()
			w.Status = nil
			b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(w)
			out[k] = phase.String() + ":" + string(b)
		case strings.HasPrefix(k, auth.TokenKeyPrefix):
			var rec map[string]any
			if json.Unmarshal(kv.Value, &rec) != nil {
				out[k] = "undecodable"
				continue
			}
			delete(rec, "last_used_at")
			b, _ := json.Marshal(rec)
			out[k] = string(b)
		case strings.HasPrefix(k, store.Prefix(store.KindQueues)),
			strings.HasPrefix(k, store.Prefix(store.KindClusters)),
			strings.HasPrefix(k, store.Prefix(store.KindIdempotency)):
			out[k] = string(kv.Value)
		}
	}
	return out
}

// diffState names what changed between two snapshots; "" when nothing.
func diffState(before, after map[string]string) string {
	var d []string
	for k, v := range before {
		if w, ok := after[k]; !ok {
			d = append(d, "deleted "+k)
		} else if w != v {
			d = append(d, "changed "+k)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			d = append(d, "created "+k)
		}
	}
	sort.Strings(d)
	return strings.Join(d, "; ")
}

// --- audit -------------------------------------------------------------------

// waitAudit finds the audit event of requestID (as the admin reads the
// log), filtered by verb, result and, when set, user. It polls: the etcd
// log is written in the background (at most 10 s).
func (f *fixture) waitAudit(t testing.TB, requestID, verb, user string, result meridianv1.AuditResult) *meridianv1.AuditEvent {
	t.Helper()
	req := &meridianv1.ListAuditEventsRequest{Verb: verb, User: user, Result: result, PageSize: 1000}
	for i := 0; i < 1000; i++ {
		resp := &meridianv1.ListAuditEventsResponse{}
		if err := f.invoke(f.adminCred(), authz.MethodListAuditEvents, req, resp, ""); err != nil {
			t.Fatalf("ListAuditEvents: %v", err)
		}
		for _, e := range resp.GetEvents() {
			if e.GetRequestId() == requestID {
				return e
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no audit event for request %s (verb %q, user %q, result %s) after 10s", requestID, verb, user, result)
	return nil
}

// --- setup helpers -----------------------------------------------------------

func leafWorkload(queue, name string) *meridianv1.Workload {
	return &meridianv1.Workload{
		Name: name, Queue: queue, Priority: 10, Preemptible: true,
		PodSets: []*meridianv1.PodSet{{Name: "worker", Replicas: 1,
			Resources: &meridianv1.Resources{GpuMilli: 1000, CpuMilli: 1000, MemoryMib: 1024, AcceleratorClass: accelClass}}},
		Runtime: &meridianv1.RuntimeTemplate{Kind: &meridianv1.RuntimeTemplate_Container{Container: &meridianv1.ContainerTemplate{Image: "example/train:1"}}},
	}
}

// mustSubmit submits w as c and returns its id.
func (f *fixture) mustSubmit(t testing.TB, c cred, w *meridianv1.Workload) string {
	t.Helper()
	resp := &meridianv1.SubmitWorkloadResponse{}
	if err := f.invoke(c, "/meridian.v1.WorkloadService/SubmitWorkload", &meridianv1.SubmitWorkloadRequest{Workload: w}, resp, ""); err != nil {
		t.Fatalf("submit to %s as %s: %v", w.GetQueue(), c.name, err)
	}
	return resp.GetWorkload().GetId()
}

// mustCreateQueue creates q as the admin.
func (f *fixture) mustCreateQueue(t testing.TB, q *meridianv1.Queue) {
	t.Helper()
	if err := f.invoke(f.adminCred(), "/meridian.v1.QueueService/CreateQueue", &meridianv1.CreateQueueRequest{Queue: q}, &meridianv1.Queue{}, ""); err != nil {
		t.Fatalf("create queue %s: %v", q.GetPath(), err)
	}
}

func (f *fixture) getQueue(t testing.TB, path string) *meridianv1.Queue {
	t.Helper()
	q := &meridianv1.Queue{}
	if err := f.invoke(f.adminCred(), "/meridian.v1.QueueService/GetQueue", &meridianv1.GetQueueRequest{Path: path}, q, ""); err != nil {
		t.Fatalf("get queue %s: %v", path, err)
	}
	return q
}

// mustCreateToken creates an API token as c and returns its id and secret.
func (f *fixture) mustCreateToken(t testing.TB, c cred, tok *meridianv1.APIToken) (string, string) {
	t.Helper()
	resp := &meridianv1.CreateAPITokenResponse{}
	if err := f.invoke(c, authz.MethodCreateAPIToken, &meridianv1.CreateAPITokenRequest{Token: tok}, resp, ""); err != nil {
		t.Fatalf("create API token as %s: %v", c.name, err)
	}
	return resp.GetToken().GetId(), resp.GetSecret()
}

func quotas(milli int64) []*meridianv1.QueueQuota {
	return []*meridianv1.QueueQuota{{AcceleratorClass: accelClass, NominalMilliGpus: milli}}
}

func access(entries ...string) []*meridianv1.AccessEntry {
	var out []*meridianv1.AccessEntry
	for _, e := range entries {
		subject, verbs, _ := strings.Cut(e, "=")
		out = append(out, &meridianv1.AccessEntry{Subject: subject, Verbs: strings.Split(verbs, ",")})
	}
	return out
}

// codeOf is the gRPC code of err.
func codeOf(err error) codes.Code { return status.Code(err) }

// --- a small CA ----------------------------------------------------------------

// testCA issues server and client certificates; unlike internal/testpki it
// can issue many, with any common name and organizations.
type testCA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(2 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue makes a leaf: a server certificate for 127.0.0.1, or a client
// certificate with common name cn and organizations orgs.
func (ca *testCA) issue(t testing.TB, serial int64, cn string, orgs []string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(2 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// clientCert returns a TLS client certificate for cn in orgs.
func (ca *testCA) clientCert(t testing.TB, serial int64, cn string, orgs ...string) tls.Certificate {
	t.Helper()
	c, k := ca.issue(t, serial, cn, orgs, false)
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// mtlsClients returns a gRPC connection and an HTTP client presenting cert.
func (f *fixture) mtlsClients(t testing.TB, cert tls.Certificate) (*grpc.ClientConn, *http.Client) {
	t.Helper()
	cfg := &tls.Config{RootCAs: f.pool, Certificates: []tls.Certificate{cert}}
	conn, err := grpc.NewClient(f.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg.Clone()}, Timeout: 30 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	return conn, hc
}

// isStatus reports whether err is a gRPC status error with code c.
func isStatus(err error, c codes.Code) bool {
	var se interface{ GRPCStatus() *status.Status }
	return errors.As(err, &se) && se.GRPCStatus().Code() == c
}
