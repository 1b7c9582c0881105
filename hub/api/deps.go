package api

import (
	"context"
	"errors"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meridian-gpu/meridian/hub/auth"
	"github.com/meridian-gpu/meridian/hub/leader"
	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// ClusterSource is the fleet as the scheduling loop sees it. The loop
// (hub/dispatch) implements it; the API only reads it and forwards drain
// requests. Methods may be called concurrently and must not block on I/O
// except SetDraining, which persists the flag and may block until ctx ends.
type ClusterSource interface {
	// ListClusters returns every known cluster, sorted by id. The caller
	// must not modify the result.
	ListClusters() []*meridianv1.Cluster
	// GetCluster returns one cluster and whether it is known.
	GetCluster(id string) (*meridianv1.Cluster, bool)
	// SetDraining closes (true) or reopens (false) a cluster to new
	// dispatches. It is idempotent.
	SetDraining(ctx context.Context, id string, draining bool) error
}

// Explainer answers "why is my workload pending?" from the scheduler's
// latest snapshot. It may be called concurrently and must not change state.
type Explainer interface {
	Explain(ctx context.Context, w *meridianv1.Workload) (*meridianv1.ExplainWorkloadResponse, error)
}

// QueueStatusSource gives a queue's usage, borrowed capacity and fairshare
// factor from the scheduling loop's accounting. It returns nil for a queue
// it does not know. It must not block.
type QueueStatusSource interface {
	QueueStatus(path string) *meridianv1.QueueStatus
}

// HealthCheck reports one component's health. It must return within ctx.
type HealthCheck func(ctx context.Context) (meridianv1.HealthStatus, string)

// Deps are the service's collaborators. Store is required.
type Deps struct {
	// Store reads and writes etcd. Required.
	Store *store.Store
	// Workloads is a watch cache of store.Prefix(store.KindWorkloads) or of
	// any prefix above it (the hub shares one cache of store.Root+"/"); it
	// feeds WatchWorkloads from revision 0. Nil means watches read etcd
	// directly.
	Workloads *store.Cache
	// Clusters, Explainer and QueueStatus come from the scheduling loop;
	// each may be nil.
	Clusters    ClusterSource
	Explainer   Explainer
	QueueStatus QueueStatusSource
	// ClassWeights are the configuration's fairshare weights by accelerator
	// class (scheduling.classWeights); ListAcceleratorClasses reports
	// them. Nil means none.
	ClassWeights map[string]float64
	// FitChecker answers reject_if_never_fits; nil makes that flag a no-op.
	FitChecker FitChecker
	// Intake, when set, is offered every new submit first: the leader's
	// scheduling loop stores those it takes itself (see storeNew).
	Intake Intake
	// Elector is this replica's elector and ElectionPrefix the election's
	// key prefix; both are needed for GetLeader and the leader health line.
	Elector        *leader.Elector
	ElectionPrefix string
	// LeaderSince, when set, says when this replica's current term began.
	LeaderSince func() (time.Time, bool)
	// Address is the API address this replica advertises in GetLeader.
	Address string
	// Health adds components to GetHealth, by name (for example "nats",
	// "scheduler"). "etcd" and "leader" are built in.
	Health map[string]HealthCheck
	// CancelWait bounds how long CancelWorkload waits for the leader's
	// loop to act on a cancel request before it answers with the request
	// noted (0: two seconds; negative: it does not wait).
	CancelWait time.Duration
	// HubID names this replica; Version is the build version.
	HubID, Version string
	// Logger receives request logs and recovered panics; nil drops them.
	Logger *slog.Logger
	// Clock stamps create, update and end times; nil means time.Now.
	Clock func() time.Time
	// BookmarkEvery is how often a quiet watch stream gets a BOOKMARK with
	// its latest revision; 0 means 10s.
	BookmarkEvery time.Duration
	// Metrics, when set, also receives the service's own measurements
	// (submits per etcd transaction).
	Metrics *Metrics
	// Guard, when set, is the one authentication and authorization layer:
	// install Guard.Unary and Guard.Stream on the gRPC server. Without it
	// every caller may do everything (--auth=none on loopback, tests).
	Guard *Guard
	// Tokens issues and revokes API tokens; nil answers the token RPCs
	// with Unimplemented.
	Tokens *auth.Tokens
	// SpokeAuth issues, lists and revokes clusters' NATS credentials
	// (RegisterCluster and friends); nil answers them FAILED_PRECONDITION.
	SpokeAuth SpokeAuthority
	// AuditLog, when set, is read by ListAuditEvents (the etcd log the
	// guard's recorder writes).
	AuditLog bool
}

// Service implements the four meridian.v1 services.
type Service struct {
	meridianv1.UnimplementedWorkloadServiceServer
	meridianv1.UnimplementedQueueServiceServer
	meridianv1.UnimplementedClusterServiceServer
	meridianv1.UnimplementedAdminServiceServer

	d   Deps
	st  *store.Store
	cli *clientv3.Client
	log *slog.Logger
	ids *idGen
	now func() time.Time

	bookmarkEvery time.Duration
	submits       *groupCommitter // shares etcd transactions between concurrent submits
}

// New checks deps and returns the service.
func New(d Deps) (*Service, error) {
	if d.Store == nil {
		return nil, errors.New("api: Deps.Store is required")
	}
	if d.Elector != nil && d.ElectionPrefix == "" {
		return nil, errors.New("api: Deps.ElectionPrefix is required with Deps.Elector")
	}
	l := d.Logger
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	now := d.Clock
	if now == nil {
		now = time.Now
	}
	if d.BookmarkEvery < 0 {
		return nil, errors.New("api: Deps.BookmarkEvery must not be negative")
	}
	be := d.BookmarkEvery
	if be == 0 {
		be = 10 * time.Second
	}
	submits := newGroupCommitter(d.Store)
	if d.Metrics != nil {
		submits.observe = d.Metrics.submitTxn.Observe
	}
	s := &Service{d: d, st: d.Store, cli: d.Store.Client(), log: l, ids: newIDGen(), now: now, bookmarkEvery: be,
		submits: submits}
	if d.Guard != nil {
		d.Guard.attach(s)
	}
	return s, nil
}

// Intake is the leader's scheduling loop taking submits to store itself,
// with its next decision: a workload it can place at once is written once,
// already DISPATCHED, instead of QUEUED by the API and again by the loop
// (dispatch.Loop.Submit). ops is the submit's whole commit: a create of
// each of ws, in ws's order, and the ops that must commit with them. taken false means
// nothing was stored and the API stores the submit itself; otherwise out
// is ws as stored, or err says why the outcome is not known.
type Intake interface {
	Submit(ctx context.Context, ws []*meridianv1.Workload, ops []store.Op) (out []*meridianv1.Workload, taken bool, err error)
}
