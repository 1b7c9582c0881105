package server

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

func dialHub(t *testing.T, s *Server) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(s.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// reflect sends one reflection request and returns the answer.
func reflect(t *testing.T, conn *grpc.ClientConn, req *reflectionpb.ServerReflectionRequest) (*reflectionpb.ServerReflectionResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(req); err != nil && err != io.EOF {
		return nil, err // io.EOF: the server ended the stream; Recv says why
	}
	return stream.Recv()
}

// What `grpcurl -plaintext HOST list` and `grpcurl ... describe` need: the
// reflection service lists the API and health services and describes the
// error details the API's errors carry; health answers SERVING once ready
// and turns NOT_SERVING on shutdown.
func TestGRPCReflectionAndHealth(t *testing.T) {
	s, stop := startHub(t, t.TempDir())
	conn := dialHub(t, s)

	resp, err := reflect(t, conn, &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	if err != nil {
		t.Fatalf("reflection list: %v", err)
	}
	var names []string
	for _, svc := range resp.GetListServicesResponse().GetService() {
		names = append(names, svc.GetName())
	}
	for _, want := range []string{
		"meridian.v1.WorkloadService", "meridian.v1.QueueService", "meridian.v1.ClusterService", "meridian.v1.AdminService",
		"grpc.health.v1.Health",
	} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v; %s is missing", names, want)
		}
	}

	// grpcurl decodes error details by asking for the symbol.
	for _, sym := range []string{"google.rpc.BadRequest", "meridian.v1.Workload"} {
		resp, err = reflect(t, conn, &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: sym}})
		if err != nil {
			t.Fatalf("reflection describe %s: %v", sym, err)
		}
		if e := resp.GetErrorResponse(); e != nil {
			t.Fatalf("reflection cannot describe %s: %s", sym, e.GetErrorMessage())
		}
		files := resp.GetFileDescriptorResponse().GetFileDescriptorProto()
		if len(files) == 0 {
			t.Fatalf("reflection returned no file for %s", sym)
		}
		var fd descriptorpb.FileDescriptorProto
		if err := proto.Unmarshal(files[0], &fd); err != nil {
			t.Fatal(err)
		}
		if sym == "google.rpc.BadRequest" && fd.GetName() != "google/rpc/error_details.proto" {
			t.Errorf("google.rpc.BadRequest described by %q, want google/rpc/error_details.proto", fd.GetName())
		}
	}

	hc := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, svc := range []string{"", "meridian.v1.WorkloadService"} {
		for {
			r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("health of %q never SERVING: %v %v", svc, r.GetStatus(), err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "no.such.Service"}); status.Code(err) != codes.NotFound {
		t.Errorf("health of an unknown service: %v, want NotFound", err)
	}

	// A watcher sees NOT_SERVING when the hub shuts down.
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first watch answer %v %v, want SERVING", r.GetStatus(), err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	r, err := w.Recv()
	if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("on shutdown the health watch got %v %v, want NOT_SERVING", r.GetStatus(), err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Run: %v", err)
	}
}

func TestGRPCReflectionCanBeTurnedOff(t *testing.T) {
	s, _ := runHub(t, Config{DataDir: t.TempDir(), HubID: "hub-noreflect", UnsafeNoFsync: true, NoScheduler: true, DisableReflection: true, Logger: testLogger()})
	conn := dialHub(t, s)
	_, err := reflect(t, conn, &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("reflection with DisableReflection: %v, want Unimplemented", err)
	}
	// Health stays on.
	hctx, hcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer hcancel()
	if _, err := healthpb.NewHealthClient(conn).Check(hctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health with reflection off: %v", err)
	}
}

// With authentication on, as in the demo: reflection follows the API's
// authorization (an anonymous `grpcurl list` is refused, one with the
// token works), and health stays open to probes without credentials.
func TestGRPCReflectionFollowsAuthentication(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "admin.token")
	s, _ := runHub(t, Config{DataDir: filepath.Join(dir, "data"), HubID: "hub-authrefl", UnsafeNoFsync: true, NoScheduler: true, Logger: testLogger(),
		Security: Security{Mode: AuthOn, AdminTokenFile: tokenFile}})
	conn := dialHub(t, s)

	list := &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}
	if _, err := reflect(t, conn, list); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("anonymous reflection with auth on: %v, want Unauthenticated", err)
	}
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	authed, err := grpc.NewClient(s.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, o ...grpc.CallOption) error {
			return inv(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+strings.TrimSpace(string(tok))), m, req, reply, cc, o...)
		}),
		grpc.WithStreamInterceptor(func(ctx context.Context, d *grpc.StreamDesc, cc *grpc.ClientConn, m string, st grpc.Streamer, o ...grpc.CallOption) (grpc.ClientStream, error) {
			return st(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+strings.TrimSpace(string(tok))), d, cc, m, o...)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = authed.Close() })
	resp, err := reflect(t, authed, list)
	if err != nil || len(resp.GetListServicesResponse().GetService()) == 0 {
		t.Fatalf("reflection with the admin token: %v %v", resp, err)
	}

	hctx, hcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer hcancel()
	if _, err := healthpb.NewHealthClient(conn).Check(hctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("anonymous health check with auth on: %v", err)
	}
}
