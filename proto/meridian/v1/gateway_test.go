package meridianv1_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/meridian-gpu/meridian/hub/api/validation"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// recorder remembers the last RPC the gateway made and its request.
type recorder struct {
	mu     sync.Mutex
	method string
	req    proto.Message
}

func (r *recorder) set(method string, req proto.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.method, r.req = method, proto.Clone(req)
}

func (r *recorder) get() (string, proto.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.method, r.req
}

// unary records the request and answers with an empty response of the
// method's output type, without calling any handler. SubmitWorkload runs
// the real validation, so the error mapping can be checked.
func (r *recorder) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
	msg := req.(proto.Message)
	r.set(info.FullMethod, msg)
	if sub, ok := msg.(*meridianv1.SubmitWorkloadRequest); ok {
		if err := validation.ValidateWorkload(sub.GetWorkload()); err != nil {
			return nil, err
		}
	}
	parts := strings.Split(strings.TrimPrefix(info.FullMethod, "/"), "/")
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(parts[0]))
	if err != nil {
		return nil, err
	}
	out := d.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(parts[1])).Output()
	mt, err := protoregistry.GlobalTypes.FindMessageByName(out.FullName())
	if err != nil {
		return nil, err
	}
	return mt.New().Interface(), nil
}

// watcher implements the one streaming RPC.
type watcher struct {
	meridianv1.UnimplementedWorkloadServiceServer
	rec *recorder
}

func (w *watcher) WatchWorkloads(req *meridianv1.WatchWorkloadsRequest, stream grpc.ServerStreamingServer[meridianv1.WorkloadEvent]) error {
	w.rec.set("/meridian.v1.WorkloadService/WatchWorkloads", req)
	for i, id := range []string{"wl-a", "wl-b"} {
		ev := &meridianv1.WorkloadEvent{
			Type:     meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_ADDED,
			Workload: &meridianv1.Workload{Id: id},
			Revision: int64(i + 1),
		}
		if err := stream.Send(ev); err != nil {
			return err
		}
	}
	return nil
}

// startGateway runs a gRPC server on a loopback port and the REST gateway in
// front of it, both torn down at the end of the test.
func startGateway(t *testing.T) (*httptest.Server, *recorder) {
	t.Helper()
	rec := &recorder{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(rec.unary))
	meridianv1.RegisterWorkloadServiceServer(srv, &watcher{rec: rec})
	meridianv1.RegisterQueueServiceServer(srv, meridianv1.UnimplementedQueueServiceServer{})
	meridianv1.RegisterClusterServiceServer(srv, meridianv1.UnimplementedClusterServiceServer{})
	meridianv1.RegisterAdminServiceServer(srv, meridianv1.UnimplementedAdminServiceServer{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx := context.Background()
	mux := runtime.NewServeMux()
	for _, reg := range []func(context.Context, *runtime.ServeMux, *grpc.ClientConn) error{
		meridianv1.RegisterWorkloadServiceHandler,
		meridianv1.RegisterQueueServiceHandler,
		meridianv1.RegisterClusterServiceHandler,
		meridianv1.RegisterAdminServiceHandler,
	} {
		if err := reg(ctx, mux, conn); err != nil {
			t.Fatal(err)
		}
	}
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return hs, rec
}

func do(t *testing.T, hs *httptest.Server, method, path, body string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, hs.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestGatewayRoutes(t *testing.T) {
	hs, rec := startGateway(t)
	i64 := func(v int64) *int64 { return &v }
	tests := map[string]struct {
		method, path, body string
		wantRPC            string
		wantReq            proto.Message
	}{
		"submit": {"POST", "/v1/workloads", `{"queue":"acme","podSets":[{"name":"main","replicas":1}],"idempotencyKey":"k1"}`,
			"WorkloadService/SubmitWorkload", &meridianv1.SubmitWorkloadRequest{Workload: &meridianv1.Workload{
				Queue: "acme", PodSets: []*meridianv1.PodSet{{Name: "main", Replicas: 1}}, IdempotencyKey: "k1"}}},
		"get workload": {"GET", "/v1/workloads/wl-1", "",
			"WorkloadService/GetWorkload", &meridianv1.GetWorkloadRequest{Id: "wl-1"}},
		"list workloads": {"GET", "/v1/workloads?page_size=10&pageToken=t&queue=acme%2Fvision&phase=WORKLOAD_PHASE_RUNNING&phase=WORKLOAD_PHASE_QUEUED&cluster=eu-1&labelSelector=team%3Dv", "",
			"WorkloadService/ListWorkloads", &meridianv1.ListWorkloadsRequest{PageSize: 10, PageToken: "t", Queue: "acme/vision",
				Phase:   []meridianv1.WorkloadPhase{meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING, meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED},
				Cluster: "eu-1", LabelSelector: "team=v"}},
		"cancel": {"POST", "/v1/workloads/wl-1:cancel", `{"reason":"no longer needed"}`,
			"WorkloadService/CancelWorkload", &meridianv1.CancelWorkloadRequest{Id: "wl-1", Reason: "no longer needed"}},
		"explain": {"GET", "/v1/workloads/wl-1:explain", "",
			"WorkloadService/ExplainWorkload", &meridianv1.ExplainWorkloadRequest{Id: "wl-1"}},
		"create queue": {"POST", "/v1/queues", `{"path":"acme/vision","weight":2,"quotas":[{"acceleratorClass":"nvidia-h100-80gb","nominalMilliGpus":"8000","borrowLimitMilli":"0"}]}`,
			"QueueService/CreateQueue", &meridianv1.CreateQueueRequest{Queue: &meridianv1.Queue{Path: "acme/vision", Weight: 2,
				Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: "nvidia-h100-80gb", NominalMilliGpus: 8000, BorrowLimitMilli: i64(0)}}}}},
		"update queue": {"PATCH", "/v1/queues/acme/vision", `{"weight":3}`,
			"QueueService/UpdateQueue", &meridianv1.UpdateQueueRequest{Queue: &meridianv1.Queue{Path: "acme/vision", Weight: 3},
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"weight"}}}},
		"get queue three segments": {"GET", "/v1/queues/acme/vision/train", "",
			"QueueService/GetQueue", &meridianv1.GetQueueRequest{Path: "acme/vision/train"}},
		"get queue one segment": {"GET", "/v1/queues/acme", "",
			"QueueService/GetQueue", &meridianv1.GetQueueRequest{Path: "acme"}},
		"list queues": {"GET", "/v1/queues?prefix=acme&page_size=5", "",
			"QueueService/ListQueues", &meridianv1.ListQueuesRequest{Prefix: "acme", PageSize: 5}},
		"delete queue": {"DELETE", "/v1/queues/acme/vision", "",
			"QueueService/DeleteQueue", &meridianv1.DeleteQueueRequest{Path: "acme/vision"}},
		"list clusters": {"GET", "/v1/clusters?state=CLUSTER_STATE_LOST", "",
			"ClusterService/ListClusters", &meridianv1.ListClustersRequest{State: meridianv1.ClusterState_CLUSTER_STATE_LOST}},
		"get cluster": {"GET", "/v1/clusters/eu-1", "",
			"ClusterService/GetCluster", &meridianv1.GetClusterRequest{Id: "eu-1"}},
		"drain cluster": {"POST", "/v1/clusters/eu-1:drain", `{"reason":"maintenance"}`,
			"ClusterService/DrainCluster", &meridianv1.DrainClusterRequest{Id: "eu-1", Reason: "maintenance"}},
		"resume cluster": {"POST", "/v1/clusters/eu-1:resume", `{}`,
			"ClusterService/ResumeCluster", &meridianv1.ResumeClusterRequest{Id: "eu-1"}},
		"leader": {"GET", "/v1/admin/leader", "", "AdminService/GetLeader", &meridianv1.GetLeaderRequest{}},
		"health": {"GET", "/v1/admin/health", "", "AdminService/GetHealth", &meridianv1.GetHealthRequest{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rec.set("", &emptypb.Empty{})
			code, body := do(t, hs, tc.method, tc.path, tc.body)
			if code != http.StatusOK {
				t.Fatalf("%s %s = %d %s, want 200", tc.method, tc.path, code, body)
			}
			method, req := rec.get()
			if method != "/meridian.v1."+tc.wantRPC {
				t.Fatalf("routed to %q, want %q", method, tc.wantRPC)
			}
			if !proto.Equal(req, tc.wantReq) {
				t.Fatalf("request = %v, want %v", req, tc.wantReq)
			}
		})
	}
}

func TestGatewayWatchStreamsNDJSON(t *testing.T) {
	hs, rec := startGateway(t)
	code, body := do(t, hs, "GET", "/v1/workloads:watch?queue=acme&sendInitial=true", "")
	if code != http.StatusOK {
		t.Fatalf("watch = %d %s", code, body)
	}
	method, req := rec.get()
	want := &meridianv1.WatchWorkloadsRequest{Queue: "acme", SendInitial: true}
	if method != "/meridian.v1.WorkloadService/WatchWorkloads" || !proto.Equal(req, want) {
		t.Fatalf("routed to %s with %v, want WatchWorkloads with %v", method, req, want)
	}
	var ids []string
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		var line struct {
			Result struct {
				Workload struct{ ID string } `json:"workload"`
			} `json:"result"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		ids = append(ids, line.Result.Workload.ID)
	}
	if strings.Join(ids, ",") != "wl-a,wl-b" {
		t.Fatalf("streamed workload ids %v, want [wl-a wl-b]; body %s", ids, body)
	}
}

func TestGatewayMapsValidationErrorsTo400(t *testing.T) {
	hs, _ := startGateway(t)
	code, body := do(t, hs, "POST", "/v1/workloads", `{"queue":"Acme","podSets":[{"name":"main","replicas":0}]}`)
	if code != http.StatusBadRequest {
		t.Fatalf("status = %d, want 400; body %s", code, body)
	}
	var st struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Details []struct {
			Type            string `json:"@type"`
			FieldViolations []struct {
				Field       string `json:"field"`
				Description string `json:"description"`
			} `json:"fieldViolations"`
		} `json:"details"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("body is not a status JSON: %v\n%s", err, body)
	}
	if st.Code != 3 || len(st.Details) != 1 || st.Details[0].Type != "type.googleapis.com/google.rpc.BadRequest" {
		t.Fatalf("unexpected status body: %s", body)
	}
	var fields []string
	for _, v := range st.Details[0].FieldViolations {
		fields = append(fields, v.Field)
	}
	if strings.Join(fields, ",") != "queue,pod_sets[0].replicas" {
		t.Fatalf("violations on %v, want [queue pod_sets[0].replicas]; body %s", fields, body)
	}
	t.Logf("error body: %s", body)
}
