package security

import (
	"context"
	"crypto/tls"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meridian-gpu/meridian/hub/server"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// TestTLS: plaintext to a TLS listener gets nothing; the certificate files
// are reloaded for new connections while a stream opened before keeps
// working; a client certificate of the hub's client CA is a principal
// (CommonName the user, Organization the groups).
func TestTLS(t *testing.T) {
	f := startHub(t)
	f.mustCreateQueue(t, &meridianv1.Queue{Path: "tls", Access: access("group:tls-team=manage")})

	t.Run("plaintext gRPC to the TLS listener", func(t *testing.T) {
		conn, err := grpc.NewClient(f.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = conn.Invoke(withCred(ctx, f.adminCred(), ""), qSvc+"CreateQueue",
			&meridianv1.CreateQueueRequest{Queue: &meridianv1.Queue{Path: "plaintext"}}, &meridianv1.Queue{})
		if err == nil || codeOf(err) == codes.OK {
			t.Fatal("a plaintext gRPC call to the TLS listener succeeded")
		}
	})
	t.Run("plaintext HTTP to the TLS listener", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, strings.Replace(f.restBase, "https://", "http://", 1)+"/v1/queues", strings.NewReader(`{"path":"plaintext"}`))
		req.Header.Set("Authorization", bearer(f.adminToken))
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Fatal("a plaintext REST call to the TLS listener succeeded")
			}
		}
		if err := f.invoke(f.adminCred(), qSvc+"GetQueue", &meridianv1.GetQueueRequest{Path: "plaintext"}, &meridianv1.Queue{}, ""); codeOf(err) != codes.NotFound {
			t.Fatalf("the plaintext requests created a queue: %v", err)
		}
	})
	t.Run("mutual TLS maps the certificate to a principal", func(t *testing.T) {
		conn, hc := f.mtlsClients(t, f.ca.clientCert(t, 50, "carol", "tls-team"))
		resp := &meridianv1.WhoAmIResponse{}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := conn.Invoke(ctx, admSvc+"WhoAmI", &meridianv1.WhoAmIRequest{}, resp); err != nil {
			t.Fatal(err)
		}
		p := resp.GetPrincipal()
		if p.GetUser() != "carol" || p.GetMethod() != "cert" || len(p.GetGroups()) != 1 || p.GetGroups()[0] != "tls-team" {
			t.Fatalf("WhoAmI over mTLS: %v; want carol in tls-team by cert", p)
		}
		if err := conn.Invoke(ctx, wlSvc+"SubmitWorkload", &meridianv1.SubmitWorkloadRequest{Workload: leafWorkload("tls", "by-cert")}, &meridianv1.SubmitWorkloadResponse{}); err != nil {
			t.Fatalf("carol manages queue tls through her group: %v", err)
		}
		r := f.rest(t, hc, cred{}, http.MethodGet, "/v1/whoami", nil, "")
		if r.status != http.StatusOK || !strings.Contains(string(r.body), `"carol"`) || !strings.Contains(string(r.body), `"cert"`) {
			t.Fatalf("REST WhoAmI over mTLS: %d %s", r.status, r.body)
		}
		// A bearer token decides over the certificate.
		r = f.rest(t, hc, cred{header: "Bearer not-a-real-token"}, http.MethodGet, "/v1/whoami", nil, "")
		if r.status != http.StatusUnauthorized {
			t.Fatalf("a bad bearer token beside a good certificate: %d; want 401", r.status)
		}
	})
	t.Run("certificate rotation under a live stream", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		stream, err := f.wl.WatchWorkloads(withCred(ctx, f.adminCred(), ""), &meridianv1.WatchWorkloadsRequest{Queue: "tls"})
		if err != nil {
			t.Fatal(err)
		}
		if ev, err := stream.Recv(); err != nil || ev.GetType() != meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_BOOKMARK {
			t.Fatalf("first watch event: %v %v", ev, err)
		}
		if got := f.servedSerial(t); got != 100 {
			t.Fatalf("serving certificate serial %d, want 100", got)
		}
		f.writeServerCert(t, 101)
		served := int64(0)
		for i := 0; i < 100 && served != 101; i++ { // the files are looked at once a second
			time.Sleep(100 * time.Millisecond)
			served = f.servedSerial(t)
		}
		if served != 101 {
			t.Fatalf("new connections still get serial %d after 10s; want 101", served)
		}
		id := f.mustSubmit(t, f.adminCred(), leafWorkload("tls", "after-rotation"))
		for {
			ev, err := stream.Recv()
			if err != nil {
				t.Fatalf("the stream opened before the rotation broke: %v", err)
			}
			if ev.GetWorkload().GetId() == id {
				break
			}
		}
	})
}

// servedSerial opens a new TLS connection to the gRPC listener and
// returns the serial of the certificate it is served.
func (f *fixture) servedSerial(t *testing.T) int64 {
	t.Helper()
	c, err := tls.Dial("tcp", f.grpcAddr, &tls.Config{RootCAs: f.pool, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// TestInsecureListenerRefused: server.New refuses a listener beyond
// loopback without TLS, and authentication off beyond loopback, before it
// binds anything. (With AllowInsecureNonLoopback it would bind 0.0.0.0,
// which tests here never do.)
func TestInsecureListenerRefused(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		sec   server.Security
		words string
	}{
		{"no TLS beyond loopback", server.Security{Mode: server.AuthOn}, "needs TLS"},
		{"auth mode unset beyond loopback, no TLS", server.Security{}, "needs TLS"},
		{"auth none beyond loopback", server.Security{Mode: server.AuthNone, AllowInsecureNonLoopback: true}, "only when both API addresses are loopback"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := server.New(server.Config{DataDir: filepath.Join(dir, "data"), GRPCAddr: "0.0.0.0:0", HTTPAddr: "127.0.0.1:0", Security: tc.sec})
			if err == nil {
				_ = s.Close()
				t.Fatal("server.New accepted it")
			}
			if !strings.Contains(err.Error(), tc.words) {
				t.Fatalf("error %q does not say %q", err, tc.words)
			}
		})
	}
	t.Run("AllowInsecureNonLoopback", func(t *testing.T) {
		t.Skip("accepting it would bind 0.0.0.0; the tests listen on 127.0.0.1 only")
	})
}
