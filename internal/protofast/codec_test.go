package protofast

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

func TestCodecMatchesProto(t *testing.T) {
	big := &agentv1.DispatchBatch{}
	for i := range 8 {
		big.Dispatches = append(big.Dispatches, dispatchOf(i))
	}
	for name, m := range map[string]proto.Message{
		"small": eventOf(1), "workload": storedWorkload(1), "pooled buffer": big,
		"no generated code": &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING},
	} {
		data, err := Codec{}.Marshal(m)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b := data.Materialize()
		data.Free()
		back := m.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(b, back); err != nil || !proto.Equal(back, m) {
			t.Fatalf("%s: Marshal wrote bytes that decode to %v (%v)", name, back, err)
		}
		got := m.ProtoReflect().New().Interface()
		if err := (Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, got); err != nil || !proto.Equal(got, m) {
			t.Fatalf("%s: Unmarshal gives %v (%v)", name, got, err)
		}
	}
	if _, err := (Codec{}).Marshal(&meridianv1.Workload{Name: "\xff"}); err == nil || !strings.Contains(err.Error(), "UTF-8") {
		t.Fatalf("a string proto refuses: %v", err)
	}
	if err := (Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0x12, 0x01, 0xff})}, &meridianv1.Workload{}); err == nil {
		t.Fatal("decoded a string proto refuses")
	}
	if (Codec{}).Name() != "proto" {
		t.Fatal("the codec must keep gRPC's content-subtype")
	}
}

type workloads struct {
	meridianv1.UnimplementedWorkloadServiceServer
}

func (workloads) GetWorkload(_ context.Context, req *meridianv1.GetWorkloadRequest) (*meridianv1.Workload, error) {
	w := storedWorkload(1)
	w.Id = req.GetId()
	return w, nil
}

// A server with ServerOption answers a client with DialOption, and a
// plain client; services without generated code (health) still work.
func TestCodecOverGRPC(t *testing.T) {
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(ServerOption())
	meridianv1.RegisterWorkloadServiceServer(srv, workloads{})
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	dial := func(opts ...grpc.DialOption) *grpc.ClientConn {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
		c, err := grpc.NewClient("passthrough:///bufnet", opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	ctx := context.Background()
	want := storedWorkload(1)
	want.Id = "wl-x"
	for name, c := range map[string]*grpc.ClientConn{"protofast client": dial(DialOption()), "plain client": dial()} {
		got, err := meridianv1.NewWorkloadServiceClient(c).GetWorkload(ctx, &meridianv1.GetWorkloadRequest{Id: "wl-x"})
		if err != nil || !proto.Equal(got, want) {
			t.Fatalf("%s: %v, %v", name, got, err)
		}
		wb, _ := det.Marshal(want)
		gb, _ := det.Marshal(got)
		if !bytes.Equal(wb, gb) {
			t.Fatalf("%s: the workload changed on the way", name)
		}
		if _, err := healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("%s: health: %v", name, err)
		}
	}
}
