package cli

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/api/validation"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// t0 is the fake hub's clock origin; the CLI's clock in tests is t0+1h.
var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func ts(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(t0.Add(d)) }

// fakeHub implements the four public services in memory, enough to drive
// the CLI: it validates submissions with the real validation package,
// pages lists at most pageCap items at a time (forcing the CLI to follow
// page tokens), and records the requests it gets.
type fakeHub struct {
	meridianv1.UnimplementedWorkloadServiceServer
	meridianv1.UnimplementedQueueServiceServer
	meridianv1.UnimplementedClusterServiceServer
	meridianv1.UnimplementedAdminServiceServer

	mu        sync.Mutex
	workloads []*meridianv1.Workload // newest first
	queues    map[string]*meridianv1.Queue
	clusters  []*meridianv1.Cluster
	explain   map[string]*meridianv1.ExplainWorkloadResponse
	events    []*meridianv1.WorkloadEvent
	views     []meridianv1.WorkloadView // each watch's view, in order
	health    *meridianv1.Health
	pageCap   int
	nextID    int

	listReqs    []*meridianv1.ListWorkloadsRequest
	submitReqs  []*meridianv1.SubmitWorkloadRequest
	submits     int
	queueWrites []string
	updates     []*meridianv1.UpdateQueueRequest
	failWith    error // when set, every call fails with it
	watchBlock  bool  // keep watch streams open after the events, until the client leaves
	slow        bool  // GetWorkload waits until the client gives up
	staleQueues bool  // GetQueue answers one revision behind, as if the queue changed right after

	auth fakeAuth // identity, API tokens and audit events (fakeauth_test.go)
}

func newFakeHub() *fakeHub {
	return &fakeHub{
		queues:  map[string]*meridianv1.Queue{},
		explain: map[string]*meridianv1.ExplainWorkloadResponse{},
		pageCap: 2,
		health: &meridianv1.Health{
			Status:  meridianv1.HealthStatus_HEALTH_STATUS_SERVING,
			Version: "v0.1.0-test",
			HubId:   "hub-a",
		},
	}
}

// serve starts a gRPC server for h on a free loopback port and returns its
// address; the server stops when the test ends.
func (h *fakeHub) serve(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	return h.serveOn(t, lis, grpc.ChainUnaryInterceptor(h.unaryAuth), grpc.ChainStreamInterceptor(h.streamAuth))
}

// serveOn serves h on lis with the given server options.
func (h *fakeHub) serveOn(t *testing.T, lis net.Listener, opts ...grpc.ServerOption) string {
	t.Helper()
	srv := grpc.NewServer(opts...)
	meridianv1.RegisterWorkloadServiceServer(srv, h)
	meridianv1.RegisterQueueServiceServer(srv, h)
	meridianv1.RegisterClusterServiceServer(srv, h)
	meridianv1.RegisterAdminServiceServer(srv, h)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func (h *fakeHub) fail() error {
	return h.failWith
}

// checkID answers, as the hub does, an id that cannot be a workload id.
func checkID(id string) error {
	if strings.HasPrefix(id, "wl-") {
		return nil
	}
	st, _ := status.New(codes.InvalidArgument, "id: not a workload id").WithDetails(&errdetails.BadRequest{
		FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "id", Description: fmt.Sprintf("%q is not a workload id (want wl- followed by 26 base32 characters)", id)}},
	})
	return st.Err()
}

func (h *fakeHub) find(id string) *meridianv1.Workload {
	for _, w := range h.workloads {
		if w.GetId() == id {
			return w
		}
	}
	return nil
}

func (h *fakeHub) SubmitWorkload(_ context.Context, req *meridianv1.SubmitWorkloadRequest) (*meridianv1.SubmitWorkloadResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.fail(); err != nil {
		return nil, err
	}
	w := req.GetWorkload()
	h.submitReqs = append(h.submitReqs, proto.Clone(req).(*meridianv1.SubmitWorkloadRequest))
	if err := validation.ValidateWorkload(w); err != nil {
		return nil, err
	}
	if req.GetRejectIfNeverFits() && requestedMilli(w) > 64000 {
		// As the hub: refused, nothing stored.
		st, _ := status.New(codes.FailedPrecondition, "never fits").WithDetails(&errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "pod_sets", Description: fmt.Sprintf("asks for %s GPUs; the largest cluster has 64 (reject_if_never_fits)", gpus(requestedMilli(w)))}},
		})
		return nil, st.Err()
	}
	if _, ok := h.queues[w.GetQueue()]; !ok {
		st, _ := status.New(codes.InvalidArgument, "invalid workload").WithDetails(&errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{{
				Field:       "queue",
				Description: fmt.Sprintf("queue %q does not exist; create it first (meridianctl queue apply -f FILE, or POST /v1/queues)", w.GetQueue()),
			}},
		})
		return nil, st.Err()
	}
	if k := w.GetIdempotencyKey(); k != "" {
		for _, old := range h.workloads {
			if old.GetIdempotencyKey() == k && old.GetQueue() == w.GetQueue() {
				return &meridianv1.SubmitWorkloadResponse{Workload: old, Replayed: true}, nil
			}
		}
	}
	h.submits++
	h.nextID++
	stored := proto.Clone(w).(*meridianv1.Workload)
	stored.Id = fmt.Sprintf("wl-test%04d", h.nextID)
	stored.CreateTime = ts(time.Duration(h.nextID) * time.Minute)
	stored.Status = &meridianv1.WorkloadStatus{
		Phase:         meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED,
		PendingReason: "waiting for the scheduler",
	}
	h.workloads = append([]*meridianv1.Workload{stored}, h.workloads...)
	return &meridianv1.SubmitWorkloadResponse{Workload: stored}, nil
}

func (h *fakeHub) GetWorkload(ctx context.Context, req *meridianv1.GetWorkloadRequest) (*meridianv1.Workload, error) {
	h.mu.Lock()
	if h.slow {
		h.mu.Unlock()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	defer h.mu.Unlock()
	if err := h.fail(); err != nil {
		return nil, err
	}
	if err := checkID(req.GetId()); err != nil {
		return nil, err
	}
	if w := h.find(req.GetId()); w != nil {
		return w, nil
	}
	return nil, status.Errorf(codes.NotFound, "no workload %q", req.GetId())
}

func matchSelector(labels map[string]string, sel string) bool {
	for _, term := range strings.Split(sel, ",") {
		if term == "" {
			continue
		}
		if k, v, ok := strings.Cut(term, "!="); ok {
			if labels[k] == v {
				return false
			}
			continue
		}
		k, v, _ := strings.Cut(term, "=")
		if labels[k] != v {
			return false
		}
	}
	return true
}

func inQueue(q, prefix string) bool {
	return prefix == "" || q == prefix || strings.HasPrefix(q, prefix+"/")
}

func (h *fakeHub) ListWorkloads(_ context.Context, req *meridianv1.ListWorkloadsRequest) (*meridianv1.ListWorkloadsResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.listReqs = append(h.listReqs, proto.Clone(req).(*meridianv1.ListWorkloadsRequest))
	if err := h.fail(); err != nil {
		return nil, err
	}
	var match []*meridianv1.Workload
	for _, w := range h.workloads {
		if !inQueue(w.GetQueue(), req.GetQueue()) || (req.GetCluster() != "" && w.GetStatus().GetCluster() != req.GetCluster()) || !matchSelector(w.GetLabels(), req.GetLabelSelector()) {
			continue
		}
		if len(req.GetPhase()) > 0 {
			ok := false
			for _, p := range req.GetPhase() {
				ok = ok || p == w.GetStatus().GetPhase()
			}
			if !ok {
				continue
			}
		}
		match = append(match, w)
	}
	return pageOf(match, req.GetPageToken(), int(req.GetPageSize()), h.pageCap, func(items []*meridianv1.Workload, next string) *meridianv1.ListWorkloadsResponse {
		return &meridianv1.ListWorkloadsResponse{Workloads: items, NextPageToken: next}
	})
}

// pageOf slices items by an offset token, at most min(size, limit).
func pageOf[T any, R any](items []T, token string, size, limit int, wrap func([]T, string) R) (R, error) {
	var zero R
	off := 0
	if token != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(token, "off-"))
		if err != nil || n < 0 || n > len(items) {
			return zero, status.Errorf(codes.InvalidArgument, "bad page_token %q", token)
		}
		off = n
	}
	if size <= 0 || size > limit {
		size = limit
	}
	end := off + size
	next := ""
	if end < len(items) {
		next = fmt.Sprintf("off-%d", end)
	} else {
		end = len(items)
	}
	return wrap(items[off:end], next), nil
}

func (h *fakeHub) CancelWorkload(_ context.Context, req *meridianv1.CancelWorkloadRequest) (*meridianv1.Workload, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.fail(); err != nil {
		return nil, err
	}
	if err := checkID(req.GetId()); err != nil {
		return nil, err
	}
	w := h.find(req.GetId())
	if w == nil {
		return nil, status.Errorf(codes.NotFound, "no workload %q", req.GetId())
	}
	switch w.GetStatus().GetPhase() {
	case meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED:
		w.Status.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED
		w.Status.PendingReason = ""
		w.Status.Message = req.GetReason()
	case meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED, meridianv1.WorkloadPhase_WORKLOAD_PHASE_ACCEPTED, meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING:
		w.Status.Conditions = append(w.Status.Conditions, &meridianv1.Condition{
			Type: "CancelRequested", Status: meridianv1.ConditionStatus_CONDITION_STATUS_TRUE,
			Reason: "UserRequest", Message: req.GetReason(), LastTransitionTime: ts(50 * time.Minute),
		})
	}
	return w, nil
}

func (h *fakeHub) ExplainWorkload(_ context.Context, req *meridianv1.ExplainWorkloadRequest) (*meridianv1.ExplainWorkloadResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.fail(); err != nil {
		return nil, err
	}
	if err := checkID(req.GetId()); err != nil {
		return nil, err
	}
	if e, ok := h.explain[req.GetId()]; ok {
		return e, nil
	}
	return nil, status.Errorf(codes.NotFound, "no workload %q", req.GetId())
}

func (h *fakeHub) WatchWorkloads(req *meridianv1.WatchWorkloadsRequest, stream grpc.ServerStreamingServer[meridianv1.WorkloadEvent]) error {
	h.mu.Lock()
	events := append([]*meridianv1.WorkloadEvent(nil), h.events...)
	failWith := h.failWith
	h.views = append(h.views, req.GetView())
	h.mu.Unlock()
	if failWith != nil {
		return failWith
	}
	for _, ev := range events {
		if ev.GetWorkload() != nil && (!inQueue(ev.GetWorkload().GetQueue(), req.GetQueue()) || !matchSelector(ev.GetWorkload().GetLabels(), req.GetLabelSelector())) {
			continue
		}
		if ev.GetRevision() <= req.GetSinceRevision() {
			continue
		}
		if err := stream.Send(ev); err != nil {
			return err
		}
	}
	h.mu.Lock()
	block := h.watchBlock
	h.mu.Unlock()
	if block {
		<-stream.Context().Done()
		return stream.Context().Err()
	}
	return nil
}

func (h *fakeHub) CreateQueue(_ context.Context, req *meridianv1.CreateQueueRequest) (*meridianv1.Queue, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.fail(); err != nil {
		return nil, err
	}
	q := req.GetQueue()
	if err := validation.ValidateQueue(q); err != nil {
		return nil, err
	}
	if _, ok := h.queues[q.GetPath()]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "queue %q exists", q.GetPath())
	}
	if i := strings.LastIndexByte(q.GetPath(), '/'); i >= 0 {
		if _, ok := h.queues[q.GetPath()[:i]]; !ok {
			return nil, status.Errorf(codes.FailedPrecondition, "parent queue %q does not exist; create it first", q.GetPath()[:i])
		}
	}
	stored := proto.Clone(q).(*meridianv1.Queue)
	stored.CreateTime, stored.UpdateTime, stored.Revision = ts(0), ts(0), 1
	h.queues[q.GetPath()] = stored
	h.queueWrites = append(h.queueWrites, "create "+q.GetPath())
	return stored, nil
}

func (h *fakeHub) UpdateQueue(_ context.Context, req *meridianv1.UpdateQueueRequest) (*meridianv1.Queue, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.fail(); err != nil {
		return nil, err
	}
	q := req.GetQueue()
	old, ok := h.queues[q.GetPath()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no queue %q", q.GetPath())
	}
	if q.GetRevision() != 0 && q.GetRevision() != old.GetRevision() {
		// As the hub: the revision is a precondition.
		st, _ := status.New(codes.FailedPrecondition, "revision: stale").WithDetails(&errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "revision", Description: fmt.Sprintf("queue %s is at revision %d, not %d; read it again and retry", q.GetPath(), old.GetRevision(), q.GetRevision())}},
		})
		return nil, st.Err()
	}
	// As the hub: only the fields in the mask change; no mask means all.
	paths := req.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		paths = []string{"weight", "quotas", "description"}
	}
	stored := proto.Clone(old).(*meridianv1.Queue)
	for _, p := range paths {
		switch p {
		case "weight":
			stored.Weight = q.GetWeight()
		case "quotas":
			stored.Quotas = q.GetQuotas()
		case "description":
			stored.Description = q.GetDescription()
		case "access":
			stored.Access = q.GetAccess()
		case "submit_policy":
			stored.SubmitPolicy = q.GetSubmitPolicy()
		default:
			return nil, status.Errorf(codes.InvalidArgument, "update_mask: %q cannot be updated", p)
		}
	}
	stored.UpdateTime, stored.Revision = ts(time.Minute), old.GetRevision()+1
	h.queues[q.GetPath()] = stored
	h.queueWrites = append(h.queueWrites, fmt.Sprintf("update %s %v", q.GetPath(), req.GetUpdateMask().GetPaths()))
	h.updates = append(h.updates, proto.Clone(req).(*meridianv1.UpdateQueueRequest))
	return stored, nil
}

func (h *fakeHub) GetQueue(_ context.Context, req *meridianv1.GetQueueRequest) (*meridianv1.Queue, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.fail(); err != nil {
		return nil, err
	}
	if q, ok := h.queues[req.GetPath()]; ok {
		if h.staleQueues {
			// Someone else updates the queue right after this read.
			q = proto.Clone(q).(*meridianv1.Queue)
			q.Revision--
		}
		return q, nil
	}
	return nil, status.Errorf(codes.NotFound, "no queue %q", req.GetPath())
}

func (h *fakeHub) ListQueues(_ context.Context, req *meridianv1.ListQueuesRequest) (*meridianv1.ListQueuesResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.fail(); err != nil {
		return nil, err
	}
	var match []*meridianv1.Queue
	for p, q := range h.queues {
		if inQueue(p, req.GetPrefix()) {
			match = append(match, q)
		}
	}
	sort.Slice(match, func(i, j int) bool { return match[i].GetPath() < match[j].GetPath() })
	return pageOf(match, req.GetPageToken(), int(req.GetPageSize()), h.pageCap, func(items []*meridianv1.Queue, next string) *meridianv1.ListQueuesResponse {
		return &meridianv1.ListQueuesResponse{Queues: items, NextPageToken: next}
	})
}

func (h *fakeHub) DeleteQueue(_ context.Context, req *meridianv1.DeleteQueueRequest) (*emptypb.Empty, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.fail(); err != nil {
		return nil, err
	}
	if _, ok := h.queues[req.GetPath()]; !ok {
		return nil, status.Errorf(codes.NotFound, "no queue %q", req.GetPath())
	}
	for p := range h.queues {
		if strings.HasPrefix(p, req.GetPath()+"/") {
			return nil, status.Errorf(codes.FailedPrecondition, "queue %q has child queues; delete them first", req.GetPath())
		}
	}
	delete(h.queues, req.GetPath())
	h.queueWrites = append(h.queueWrites, "delete "+req.GetPath())
	return &emptypb.Empty{}, nil
}

func (h *fakeHub) setDraining(id string, draining bool, reason string) (*meridianv1.Cluster, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.fail(); err != nil {
		return nil, err
	}
	for _, c := range h.clusters {
		if c.GetId() != id {
			continue
		}
		if c.GetState() == meridianv1.ClusterState_CLUSTER_STATE_LOST {
			return c, nil
		}
		c.State, c.DrainReason = meridianv1.ClusterState_CLUSTER_STATE_READY, ""
		if draining {
			c.State, c.DrainReason = meridianv1.ClusterState_CLUSTER_STATE_DRAINING, reason
		}
		return c, nil
	}
	return nil, status.Errorf(codes.NotFound, "no cluster %q", id)
}

func (h *fakeHub) DrainCluster(_ context.Context, req *meridianv1.DrainClusterRequest) (*meridianv1.Cluster, error) {
	return h.setDraining(req.GetId(), true, req.GetReason())
}

func (h *fakeHub) ResumeCluster(_ context.Context, req *meridianv1.ResumeClusterRequest) (*meridianv1.Cluster, error) {
	return h.setDraining(req.GetId(), false, "")
}

func (h *fakeHub) ListClusters(_ context.Context, req *meridianv1.ListClustersRequest) (*meridianv1.ListClustersResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.fail(); err != nil {
		return nil, err
	}
	var out []*meridianv1.Cluster
	for _, c := range h.clusters {
		if req.GetState() != meridianv1.ClusterState_CLUSTER_STATE_UNSPECIFIED && c.GetState() != req.GetState() {
			continue
		}
		if !matchSelector(c.GetLabels(), req.GetLabelSelector()) {
			continue
		}
		out = append(out, c)
	}
	return &meridianv1.ListClustersResponse{Clusters: out}, nil
}

func (h *fakeHub) GetHealth(context.Context, *meridianv1.GetHealthRequest) (*meridianv1.Health, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.fail(); err != nil {
		return nil, err
	}
	return h.health, nil
}

// seed fills the hub with a small, fixed fleet: a queue tree, workloads in
// several phases, three clusters, one explanation and a few events.
func (h *fakeHub) seed() {
	i64 := func(v int64) *int64 { return &v }
	for _, q := range []*meridianv1.Queue{
		{Path: "acme", Weight: 1, Quotas: []*meridianv1.QueueQuota{
			{AcceleratorClass: "nvidia-h100-80gb", NominalMilliGpus: 64000},
			{AcceleratorClass: "nvidia-l4", NominalMilliGpus: 8000, LendLimitMilli: i64(4000)},
		}, Status: &meridianv1.QueueStatus{PendingWorkloads: 2, RunningWorkloads: 2, Classes: []*meridianv1.ClassUsage{
			{AcceleratorClass: "nvidia-h100-80gb", UsageMilli: 40000},
			{AcceleratorClass: "nvidia-l4", UsageMilli: 1500},
		}}},
		{Path: "acme/search", Weight: 1, Status: &meridianv1.QueueStatus{PendingWorkloads: 1, Classes: []*meridianv1.ClassUsage{
			{AcceleratorClass: "nvidia-l4", UsageMilli: 1500, BorrowedMilli: 500},
		}}},
		{Path: "acme/search/inference", Quotas: []*meridianv1.QueueQuota{
			{AcceleratorClass: "nvidia-l4", NominalMilliGpus: 1000, BorrowLimitMilli: i64(0)},
		}, Status: &meridianv1.QueueStatus{PendingWorkloads: 1, RunningWorkloads: 1, Classes: []*meridianv1.ClassUsage{
			{AcceleratorClass: "nvidia-l4", UsageMilli: 1500, BorrowedMilli: 500, DecayedGpuSeconds: 5400, FairshareFactor: 0.25},
		}}},
		{Path: "acme/vision", Weight: 3, Quotas: []*meridianv1.QueueQuota{
			{AcceleratorClass: "nvidia-h100-80gb", NominalMilliGpus: 48000, BorrowLimitMilli: i64(16000)},
		}, Status: &meridianv1.QueueStatus{PendingWorkloads: 1, RunningWorkloads: 1, Classes: []*meridianv1.ClassUsage{
			{AcceleratorClass: "nvidia-h100-80gb", UsageMilli: 40000, LentMilli: 8000, DecayedGpuSeconds: 1.44e6},
		}}},
		{Path: "acme/vision/train", Quotas: []*meridianv1.QueueQuota{
			{AcceleratorClass: "nvidia-h100-80gb", NominalMilliGpus: 32000},
		}, Status: &meridianv1.QueueStatus{Classes: []*meridianv1.ClassUsage{
			{AcceleratorClass: "nvidia-h100-80gb", FairshareFactor: 1},
		}}},
		// Leaves as in examples/queues/acme.yaml, which the example
		// workloads name: a "*" quota borrows every class.
		{Path: "acme/research", Weight: 3, Description: "demo team, borrows any class from acme", Quotas: []*meridianv1.QueueQuota{
			{AcceleratorClass: "*"},
		}, Status: &meridianv1.QueueStatus{Classes: []*meridianv1.ClassUsage{
			{AcceleratorClass: "*", FairshareFactor: 0.5},
		}}},
		{Path: "acme/product", Weight: 2, Quotas: []*meridianv1.QueueQuota{
			{AcceleratorClass: "*"},
		}, Status: &meridianv1.QueueStatus{Classes: []*meridianv1.ClassUsage{
			{AcceleratorClass: "*", FairshareFactor: 0.333},
		}}},
		// A leaf that uses nothing and has no quota: the hub reports its
		// fairshare under class "*".
		{Path: "beta", Weight: 2, Status: &meridianv1.QueueStatus{Classes: []*meridianv1.ClassUsage{
			{AcceleratorClass: "*", FairshareFactor: 0.667},
		}}},
	} {
		q.Revision = 3
		h.queues[q.GetPath()] = q
	}
	gang := func(replicas int32, milli int32) []*meridianv1.PodSet {
		return []*meridianv1.PodSet{{Name: "worker", Replicas: replicas, Topology: meridianv1.Topology_TOPOLOGY_NVLINK_DOMAIN,
			Resources: &meridianv1.Resources{GpuMilli: milli, AcceleratorClass: "nvidia-h100-80gb"}}}
	}
	exit1 := int32(1)
	// Newest first.
	h.workloads = []*meridianv1.Workload{
		{Id: "wl-05", Name: "embed", Queue: "acme/search/inference", Priority: 5, Labels: map[string]string{"team": "search"},
			PodSets:    []*meridianv1.PodSet{{Name: "server", Replicas: 3, Resources: &meridianv1.Resources{GpuMilli: 500, GpuMemoryMib: 20480, FractionalMode: meridianv1.FractionalMode_FRACTIONAL_MODE_MPS}}},
			CreateTime: ts(50 * time.Minute),
			Status: &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED,
				PendingReason: "queue acme/search/inference is at its nvidia-l4 quota (1.5 of 1 GPUs, borrowing 0.5)", PendingReasonCode: "QuotaExceeded"}},
		{Id: "wl-04", Name: "pretrain", Queue: "acme/vision/train", Priority: 100, Labels: map[string]string{"team": "vision", "tier": "prod"},
			PodSets: gang(4, 8000), CreateTime: ts(40*time.Minute + 30*time.Second),
			Status: &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING, Cluster: "east-h100", DispatchId: "d-04-1",
				Attempts: 1, DispatchTime: ts(41 * time.Minute), StartTime: ts(42 * time.Minute),
				Assignment: []*meridianv1.PodSetAssignment{{PodSet: "worker", Replicas: []*meridianv1.ReplicaAssignment{
					{Node: "h100-a1", Gpus: []int32{0, 1, 2, 3, 4, 5, 6, 7}}, {Node: "h100-a2", Gpus: []int32{0, 1, 2, 3, 4, 5, 6, 7}},
					{Node: "h100-b1", Gpus: []int32{0, 1, 2, 3, 4, 5, 6, 7}}, {Node: "h100-b2", Gpus: []int32{0, 1, 2, 4, 6, 7}}}}},
				QuotaCharge: []*meridianv1.ClassCharge{{AcceleratorClass: "nvidia-h100-80gb", MilliGpus: 32000}}}},
		{Id: "wl-03", Queue: "acme/vision", Labels: map[string]string{"team": "vision", "tier": "batch"},
			PodSets: gang(2, 1000), CreateTime: ts(30 * time.Minute),
			Status: &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED, PendingReason: "no cluster fits: largest NVLink domain has 1 free GPU"}},
		{Id: "wl-02", Name: "lint-model", Queue: "beta", PodSets: gang(1, 1000), CreateTime: ts(0),
			Status: &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_FAILED, Cluster: "west-a100", ExitCode: &exit1,
				Message: "container exited with code 1", Attempts: 2, StartTime: ts(time.Minute), EndTime: ts(5 * time.Minute)}},
		{Id: "wl-01", Name: "nightly", Queue: "acme/search/inference", PodSets: []*meridianv1.PodSet{{Name: "server", Replicas: 2, MinReplicas: 1, Resources: &meridianv1.Resources{GpuMilli: 250, FractionalMode: meridianv1.FractionalMode_FRACTIONAL_MODE_ANY}}},
			CreateTime: ts(-26 * time.Hour),
			Status:     &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED, Cluster: "edge-l4", Attempts: 1}},
	}
	h.clusters = []*meridianv1.Cluster{
		{Id: "east-h100", State: meridianv1.ClusterState_CLUSTER_STATE_READY, Connector: meridianv1.ConnectorKind_CONNECTOR_KIND_KUBERNETES,
			LastHeartbeat: ts(59*time.Minute + 57*time.Second), RunningDispatches: 7,
			Capacity: []*meridianv1.ClassCapacity{{AcceleratorClass: "nvidia-h100-80gb", TotalMilli: 64000, FreeMilli: 24000, Nodes: 8, FreeWholeGpus: 24}}},
		{Id: "edge-l4", State: meridianv1.ClusterState_CLUSTER_STATE_DRAINING, DrainReason: "kernel upgrade", Connector: meridianv1.ConnectorKind_CONNECTOR_KIND_SIMCLUSTER,
			FractionalModes: []meridianv1.FractionalMode{meridianv1.FractionalMode_FRACTIONAL_MODE_MPS, meridianv1.FractionalMode_FRACTIONAL_MODE_TIME_SLICE},
			LastHeartbeat:   ts(59 * time.Minute), RunningDispatches: 2,
			Capacity: []*meridianv1.ClassCapacity{
				{AcceleratorClass: "nvidia-l4", TotalMilli: 8000, FreeMilli: 2750, Nodes: 2, FreeWholeGpus: 1},
				{AcceleratorClass: "nvidia-t4", TotalMilli: 4000, FreeMilli: 4000, Nodes: 1, FreeWholeGpus: 4},
			}},
		{Id: "west-a100", State: meridianv1.ClusterState_CLUSTER_STATE_LOST, Connector: meridianv1.ConnectorKind_CONNECTOR_KIND_SLURM,
			FractionalModes: []meridianv1.FractionalMode{meridianv1.FractionalMode_FRACTIONAL_MODE_SHARD},
			LastHeartbeat:   ts(12 * time.Minute)},
	}
	h.explain["wl-03"] = &meridianv1.ExplainWorkloadResponse{
		WorkloadId: "wl-03", Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED,
		PendingReason: "no cluster fits: largest NVLink domain has 1 free GPU", QueuePosition: 2,
		Quota: []*meridianv1.QuotaCheck{{AcceleratorClass: "nvidia-h100-80gb", RequestedMilli: 2000, AvailableMilli: 24000, Fits: true,
			Reason: "queue acme/vision uses 40 of 48 GPUs nominal + 16 borrowable"}},
		Clusters: []*meridianv1.ClusterFit{
			{Cluster: "east-h100", Fits: false, Lines: []string{
				"pod set worker: 1 of 2 replicas fit in one NVLink domain",
				"largest free NVLink domain has 1000 milli nvidia-h100-80gb",
			}},
			{Cluster: "edge-l4", Fits: false, Lines: []string{"draining: closed to new dispatches"}},
			{Cluster: "west-a100", Fits: false, Lines: []string{"lost: no heartbeat for 48m0s"}},
		},
		EvaluateTime: ts(59*time.Minute + 58*time.Second), PendingReasonCode: "NoFit",
	}
	// Not queued: phase, and at most the cluster it runs or ran on.
	h.explain["wl-04"] = &meridianv1.ExplainWorkloadResponse{
		WorkloadId: "wl-04", Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING,
		Clusters: []*meridianv1.ClusterFit{{Cluster: "east-h100", Fits: true, Lines: []string{
			"dispatch d-04-1, attempt 1", "running since 2026-11-30T12:42:00Z",
		}}},
		EvaluateTime: ts(59*time.Minute + 58*time.Second),
	}
	h.explain["wl-01"] = &meridianv1.ExplainWorkloadResponse{
		WorkloadId: "wl-01", Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED,
		EvaluateTime: ts(59*time.Minute + 58*time.Second),
	}
	// Queued with no per-cluster lines (an older hub, or one that has not
	// evaluated it yet).
	h.explain["wl-05"] = &meridianv1.ExplainWorkloadResponse{
		WorkloadId: "wl-05", Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED,
		PendingReason: h.workloads[0].GetStatus().GetPendingReason(), PendingReasonCode: "QuotaExceeded", QueuePosition: 1,
	}
	h.events = []*meridianv1.WorkloadEvent{
		{Type: meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_ADDED, Workload: h.workloads[1], Revision: 10, Time: ts(40 * time.Minute)},
		{Type: meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_MODIFIED, Workload: h.workloads[0], Revision: 11, Time: ts(50 * time.Minute)},
		{Type: meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_BOOKMARK, Revision: 12, Time: ts(51 * time.Minute)},
	}
}
