package authz

import (
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// Rule says how one gRPC method is authorized.
type Rule struct {
	// Method is the gRPC full method name, "/package.Service/Method".
	Method string
	// Action is what the call does, for the decision and the audit log.
	Action Action
	// Resource is what the action is checked against.
	Resource ResourceKind
	// Streaming methods are decided before the first message arrives, so
	// their rules never extract a target (lists are filtered per item).
	Streaming bool
	// Pending marks a method that is decided here but not yet in the API;
	// the completeness test fails once it exists, so the mark is removed.
	Pending bool
	// Extract takes the target from the request message; nil when the rule
	// needs none. It reports false for a message of another type.
	Extract func(req any) (Target, bool)
}

// The gRPC methods of the standard services the hub may serve beside its
// own API.
const (
	MethodHealthCheck       = "/grpc.health.v1.Health/Check"
	MethodHealthList        = "/grpc.health.v1.Health/List"
	MethodHealthWatch       = "/grpc.health.v1.Health/Watch"
	MethodReflectionV1      = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
	MethodReflectionV1Alpha = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
	MethodCreateAPIToken    = "/meridian.v1.AdminService/CreateAPIToken"
	MethodListAPITokens     = "/meridian.v1.AdminService/ListAPITokens"
	MethodRevokeAPIToken    = "/meridian.v1.AdminService/RevokeAPIToken"
	MethodListAuditEvents   = "/meridian.v1.AdminService/ListAuditEvents"
	workloadSvc             = "/meridian.v1.WorkloadService/"
	queueSvc                = "/meridian.v1.QueueService/"
	clusterSvc              = "/meridian.v1.ClusterService/"
	adminSvc                = "/meridian.v1.AdminService/"
)

// table is the one authorization table: every method the hub serves.
var table = []Rule{
	// WorkloadService
	{Method: workloadSvc + "SubmitWorkload", Action: ActWorkloadSubmit, Resource: ResourceQueue, Extract: submitTarget},
	// A batch names one queue (the handler refuses a second one before
	// storing anything) and is decided as one submit of its most
	// demanding workload: the highest priority, non-preemptible if any
	// workload is.
	{Method: workloadSvc + "SubmitWorkloads", Action: ActWorkloadSubmit, Resource: ResourceQueue, Extract: submitBatchTarget},
	{Method: workloadSvc + "GetWorkload", Action: ActWorkloadGet, Resource: ResourceWorkload, Extract: workloadTarget},
	{Method: workloadSvc + "ListWorkloads", Action: ActWorkloadList, Resource: ResourceFiltered, Extract: listWorkloadsTarget},
	{Method: workloadSvc + "CancelWorkload", Action: ActWorkloadCancel, Resource: ResourceWorkload, Extract: workloadTarget},
	{Method: workloadSvc + "ExplainWorkload", Action: ActWorkloadExplain, Resource: ResourceWorkload, Extract: workloadTarget},
	{Method: workloadSvc + "WatchWorkloads", Action: ActWorkloadWatch, Resource: ResourceFiltered, Streaming: true},
	// SearchWorkloads (the dashboard's table) lists like ListWorkloads:
	// every result and every count is filtered to what the caller may view.
	{Method: workloadSvc + "SearchWorkloads", Action: ActWorkloadList, Resource: ResourceFiltered, Extract: searchWorkloadsTarget},

	// QueueService
	{Method: queueSvc + "CreateQueue", Action: ActQueueCreate, Resource: ResourceQueue, Extract: createQueueTarget},
	{Method: queueSvc + "UpdateQueue", Action: ActQueueUpdate, Resource: ResourceQueue, Extract: updateQueueTarget},
	{Method: queueSvc + "GetQueue", Action: ActQueueGet, Resource: ResourceQueue, Extract: getQueueTarget},
	{Method: queueSvc + "ListQueues", Action: ActQueueList, Resource: ResourceFiltered, Extract: listQueuesTarget},
	{Method: queueSvc + "DeleteQueue", Action: ActQueueDelete, Resource: ResourceQueue, Extract: deleteQueueTarget},

	// ClusterService: the fleet is shared infrastructure every
	// authenticated caller may inspect (to write cluster selectors);
	// changing it needs clusters.manage.
	{Method: clusterSvc + "ListClusters", Action: ActClusterList, Resource: ResourceAuthenticated},
	{Method: clusterSvc + "ListAcceleratorClasses", Action: ActClusterList, Resource: ResourceAuthenticated},
	{Method: clusterSvc + "GetCluster", Action: ActClusterGet, Resource: ResourceAuthenticated, Extract: clusterTarget},
	{Method: clusterSvc + "GetClusterTopology", Action: ActClusterGet, Resource: ResourceAuthenticated, Extract: clusterTarget},
	{Method: clusterSvc + "DrainCluster", Action: ActClusterDrain, Resource: ResourceCluster, Extract: clusterTarget},
	{Method: clusterSvc + "ResumeCluster", Action: ActClusterResume, Resource: ResourceCluster, Extract: clusterTarget},
	// A cluster's NATS credentials: issuing, listing (public keys only)
	// and revoking them all need clusters.manage.
	{Method: clusterSvc + "RegisterCluster", Action: ActClusterRegister, Resource: ResourceCluster, Extract: clusterTarget},
	{Method: clusterSvc + "ListClusterCredentials", Action: ActClusterCreds, Resource: ResourceCluster, Extract: clusterTarget},
	{Method: clusterSvc + "RevokeClusterCredentials", Action: ActClusterRevoke, Resource: ResourceCluster, Extract: clusterTarget},

	// AdminService
	{Method: adminSvc + "GetLeader", Action: ActAdminGetLeader, Resource: ResourceAuthenticated},
	{Method: adminSvc + "GetHealth", Action: ActAdminGetHealth, Resource: ResourceAuthenticated},
	{Method: adminSvc + "WhoAmI", Action: ActAdminWhoAmI, Resource: ResourceAuthenticated},
	{Method: MethodCreateAPIToken, Action: ActTokenCreate, Resource: ResourceGlobal, Extract: createTokenTarget},
	{Method: MethodListAPITokens, Action: ActTokenList, Resource: ResourceAuthenticated},
	{Method: MethodRevokeAPIToken, Action: ActTokenRevoke, Resource: ResourceToken, Extract: revokeTokenTarget},
	{Method: MethodListAuditEvents, Action: ActAuditList, Resource: ResourceGlobal},

	// Standard services. Health is open to every caller, so load balancers
	// and kubelets probe without credentials; reflection describes the
	// whole API and needs authentication.
	{Method: MethodHealthCheck, Action: ActHealthCheck, Resource: ResourceOpen},
	{Method: MethodHealthList, Action: ActHealthCheck, Resource: ResourceOpen},
	{Method: MethodHealthWatch, Action: ActHealthCheck, Resource: ResourceOpen, Streaming: true},
	{Method: MethodReflectionV1, Action: ActReflection, Resource: ResourceAuthenticated, Streaming: true},
	{Method: MethodReflectionV1Alpha, Action: ActReflection, Resource: ResourceAuthenticated, Streaming: true},
}

// ruleIndex is table by method; built once at init and never changed.
var ruleIndex = func() map[string]Rule {
	m := make(map[string]Rule, len(table))
	for _, r := range table {
		m[r.Method] = r
	}
	return m
}()

// Table returns a copy of the authorization table, in a fixed order.
func Table() []Rule {
	out := make([]Rule, len(table))
	copy(out, table)
	return out
}

// RuleFor returns the rule of a gRPC full method name.
func RuleFor(fullMethod string) (Rule, bool) {
	r, ok := ruleIndex[fullMethod]
	return r, ok
}

func submitTarget(req any) (Target, bool) {
	m, ok := req.(*meridianv1.SubmitWorkloadRequest)
	if !ok {
		return Target{}, false
	}
	w := m.GetWorkload()
	return Target{Queue: w.GetQueue(), Priority: w.GetPriority(), Preemptible: w.GetPreemptible()}, true
}

func submitBatchTarget(req any) (Target, bool) {
	m, ok := req.(*meridianv1.SubmitWorkloadsRequest)
	if !ok {
		return Target{}, false
	}
	ws := m.GetWorkloads()
	if len(ws) == 0 {
		return Target{}, true // refused as invalid by the handler
	}
	t := Target{Queue: ws[0].GetQueue(), Priority: ws[0].GetPriority(), Preemptible: true}
	for _, w := range ws {
		t.Priority = max(t.Priority, w.GetPriority())
		t.Preemptible = t.Preemptible && w.GetPreemptible()
	}
	return t, true
}

func workloadTarget(req any) (Target, bool) {
	switch m := req.(type) {
	case *meridianv1.GetWorkloadRequest:
		return Target{Workload: m.GetId()}, true
	case *meridianv1.CancelWorkloadRequest:
		return Target{Workload: m.GetId()}, true
	case *meridianv1.ExplainWorkloadRequest:
		return Target{Workload: m.GetId()}, true
	}
	return Target{}, false
}

func listWorkloadsTarget(req any) (Target, bool) {
	m, ok := req.(*meridianv1.ListWorkloadsRequest)
	return Target{Queue: m.GetQueue()}, ok
}

func searchWorkloadsTarget(req any) (Target, bool) {
	m, ok := req.(*meridianv1.SearchWorkloadsRequest)
	return Target{Queue: m.GetQueue()}, ok
}

func createQueueTarget(req any) (Target, bool) {
	m, ok := req.(*meridianv1.CreateQueueRequest)
	return Target{Queue: m.GetQueue().GetPath()}, ok
}

func updateQueueTarget(req any) (Target, bool) {
	m, ok := req.(*meridianv1.UpdateQueueRequest)
	if !ok {
		return Target{}, false
	}
	return Target{Queue: m.GetQueue().GetPath(), Fields: QueueFieldsFromMask(m.GetUpdateMask().GetPaths())}, true
}

func getQueueTarget(req any) (Target, bool) {
	m, ok := req.(*meridianv1.GetQueueRequest)
	return Target{Queue: m.GetPath()}, ok
}

func listQueuesTarget(req any) (Target, bool) {
	m, ok := req.(*meridianv1.ListQueuesRequest)
	return Target{Queue: m.GetPrefix()}, ok
}

func deleteQueueTarget(req any) (Target, bool) {
	m, ok := req.(*meridianv1.DeleteQueueRequest)
	return Target{Queue: m.GetPath()}, ok
}

func clusterTarget(req any) (Target, bool) {
	switch m := req.(type) {
	case *meridianv1.GetClusterRequest:
		return Target{Cluster: m.GetId()}, true
	case *meridianv1.GetClusterTopologyRequest:
		return Target{Cluster: m.GetId()}, true
	case *meridianv1.DrainClusterRequest:
		return Target{Cluster: m.GetId()}, true
	case *meridianv1.ResumeClusterRequest:
		return Target{Cluster: m.GetId()}, true
	case *meridianv1.RegisterClusterRequest:
		return Target{Cluster: m.GetId()}, true
	case *meridianv1.ListClusterCredentialsRequest:
		return Target{Cluster: m.GetId()}, true
	case *meridianv1.RevokeClusterCredentialsRequest:
		return Target{Cluster: m.GetId()}, true
	}
	return Target{}, false
}

// createTokenTarget takes the permissions, user and groups the new token
// asks for.
func createTokenTarget(req any) (Target, bool) {
	m, ok := req.(*meridianv1.CreateAPITokenRequest)
	if !ok {
		return Target{}, false
	}
	tok := m.GetToken()
	return Target{Permissions: tok.GetPermissions(), Owner: tok.GetUser(), Groups: tok.GetGroups()}, true
}

func revokeTokenTarget(req any) (Target, bool) {
	m, ok := req.(*meridianv1.RevokeAPITokenRequest)
	return Target{Token: m.GetId()}, ok
}
