package authz

import (
	"sort"
	"strings"
	"testing"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// servedMethod is one RPC the hub serves, from the generated descriptors.
type servedMethod struct {
	name      string
	input     protoreflect.FullName
	streaming bool
}

// servedMethods enumerates every RPC of every service in package
// meridian.v1 (from the registry, so a new service or file is seen too),
// plus the standard services the hub may serve.
func servedMethods(t *testing.T) map[string]servedMethod {
	t.Helper()
	out := map[string]servedMethod{}
	add := func(sd protoreflect.ServiceDescriptor) {
		ms := sd.Methods()
		for i := 0; i < ms.Len(); i++ {
			m := ms.Get(i)
			name := "/" + string(sd.FullName()) + "/" + string(m.Name())
			out[name] = servedMethod{name: name, input: m.Input().FullName(), streaming: m.IsStreamingClient() || m.IsStreamingServer()}
		}
	}
	protoregistry.GlobalFiles.RangeFilesByPackage("meridian.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := 0; i < fd.Services().Len(); i++ {
			add(fd.Services().Get(i))
		}
		return true
	})
	for _, name := range []protoreflect.FullName{"grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"} {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
		if err != nil {
			t.Fatalf("standard service %s not registered: %v", name, err)
		}
		add(d.(protoreflect.ServiceDescriptor))
	}
	// Cross-check with the generated service descriptors, streams
	// included: the registry and the gRPC descriptors must agree.
	for _, sd := range []grpc.ServiceDesc{
		meridianv1.WorkloadService_ServiceDesc, meridianv1.QueueService_ServiceDesc,
		meridianv1.ClusterService_ServiceDesc, meridianv1.AdminService_ServiceDesc,
		healthpb.Health_ServiceDesc, reflectionv1.ServerReflection_ServiceDesc,
		reflectionv1alpha.ServerReflection_ServiceDesc,
	} {
		for _, m := range sd.Methods {
			if _, ok := out["/"+sd.ServiceName+"/"+m.MethodName]; !ok {
				t.Errorf("unary %s/%s missing from the registry", sd.ServiceName, m.MethodName)
			}
		}
		for _, s := range sd.Streams {
			if m, ok := out["/"+sd.ServiceName+"/"+s.StreamName]; !ok || !m.streaming {
				t.Errorf("stream %s/%s missing from the registry or not streaming", sd.ServiceName, s.StreamName)
			}
		}
	}
	return out
}

// TestTableCoversEveryRPC: every RPC has a rule, every rule names an RPC
// that exists (or is marked Pending and does not exist yet), and each
// rule's streaming flag matches the RPC.
func TestTableCoversEveryRPC(t *testing.T) {
	served := servedMethods(t)
	if len(served) < 20 {
		t.Fatalf("only %d methods found; is the registry populated?", len(served))
	}
	names := make([]string, 0, len(served))
	for n := range served {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		r, ok := RuleFor(n)
		if !ok {
			t.Errorf("RPC %s has no authorization rule: add it to the table in table.go", n)
			continue
		}
		if r.Pending {
			t.Errorf("RPC %s now exists: remove its Pending mark", n)
		}
		if r.Streaming != served[n].streaming {
			t.Errorf("RPC %s: rule Streaming=%v, RPC streaming=%v", n, r.Streaming, served[n].streaming)
		}
	}
	seen := map[string]bool{}
	for _, r := range Table() {
		if seen[r.Method] {
			t.Errorf("rule %s appears twice", r.Method)
		}
		seen[r.Method] = true
		if _, ok := served[r.Method]; !ok && !r.Pending {
			t.Errorf("rule %s names an RPC that does not exist (typo, or mark it Pending)", r.Method)
		}
	}
}

// TestTableRulesAreWellFormed: targeted kinds extract a target, streaming
// rules never need the message, and every action is one authorize knows.
func TestTableRulesAreWellFormed(t *testing.T) {
	a := mustNew(t, stdConfig(), stdTree())
	root := a.Bind(user("root").Obj())
	for _, r := range Table() {
		switch r.Resource {
		case ResourceQueue, ResourceWorkload, ResourceToken, ResourceCluster:
			if r.Extract == nil {
				t.Errorf("%s: a %s rule needs an Extract", r.Method, r.Resource)
			}
		}
		if r.Streaming && r.Extract != nil {
			t.Errorf("%s: a streaming rule cannot depend on the request message", r.Method)
		}
		if d := root.authorize(r.Action, Target{}, Resolvers{}); d.Basis == "unknown action" {
			t.Errorf("%s: action %q is not handled", r.Method, r.Action)
		}
		if !strings.HasPrefix(r.Method, "/") || strings.Count(r.Method, "/") != 2 {
			t.Errorf("%s: not a gRPC full method name", r.Method)
		}
	}
}

// reqFor builds the request message of method with its "id" (or "path")
// field set, from the registry.
func reqFor(t testing.TB, method, id string) proto.Message {
	t.Helper()
	svc, name, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	md := d.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(name))
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	m := mt.New()
	for _, f := range []protoreflect.Name{"id", "path"} {
		if fd := m.Descriptor().Fields().ByName(f); fd != nil && fd.Kind() == protoreflect.StringKind {
			m.Set(fd, protoreflect.ValueOfString(id))
		}
	}
	return m.Interface()
}

// TestAuthorizeMethod drives whole RPCs through the table: extraction,
// resolution and the decision.
func TestAuthorizeMethod(t *testing.T) {
	a := mustNew(t, stdConfig(), stdTree())
	r := stdResolver().resolvers()
	submit := func(q string, prio int32, pre bool) *meridianv1.SubmitWorkloadRequest {
		return &meridianv1.SubmitWorkloadRequest{Workload: &meridianv1.Workload{Queue: q, Priority: prio, Preemptible: pre}}
	}
	update := func(path string, mask ...string) *meridianv1.UpdateQueueRequest {
		req := &meridianv1.UpdateQueueRequest{Queue: &meridianv1.Queue{Path: path}}
		if mask != nil {
			req.UpdateMask = &fieldmaskpb.FieldMask{Paths: mask}
		}
		return req
	}
	bob := user("bob").In("acme-admins").Obj()
	mint := func(user string, groups []string, perms ...string) *meridianv1.CreateAPITokenRequest {
		return &meridianv1.CreateAPITokenRequest{Token: &meridianv1.APIToken{User: user, Groups: groups, Permissions: perms}}
	}
	cases := map[string]struct {
		s      Subject
		method string
		req    any
		want   Code
		target string
	}{
		"submit extracts queue and priority":      {user("alice").In("vision").Obj(), workloadSvc + "SubmitWorkload", submit("acme/vision", 101, true), CodePermissionDenied, "queue acme/vision"},
		"submit allowed":                          {user("alice").In("vision").Obj(), workloadSvc + "SubmitWorkload", submit("acme/vision", 5, true), CodeOK, "queue acme/vision"},
		"submit with no workload":                 {user("alice").In("vision").Obj(), workloadSvc + "SubmitWorkload", &meridianv1.SubmitWorkloadRequest{}, CodeNotFound, "-"},
		"cancel resolves the workload's queue":    {user("canceller").Obj(), workloadSvc + "CancelWorkload", &meridianv1.CancelWorkloadRequest{Id: "w-train"}, CodeOK, "workload w-train (queue acme/vision/train)"},
		"cancel own via the owner resolver":       {user("nina").In("nlp").Obj(), workloadSvc + "CancelWorkload", &meridianv1.CancelWorkloadRequest{Id: "w-nlp"}, CodeOK, ""},
		"cancel another's via the resolver":       {user("alice").In("vision").Obj(), workloadSvc + "CancelWorkload", &meridianv1.CancelWorkloadRequest{Id: "w-train"}, CodePermissionDenied, ""},
		"get a missing workload":                  {user("root").Obj(), workloadSvc + "GetWorkload", &meridianv1.GetWorkloadRequest{Id: "nope"}, CodeNotFound, "workload nope"},
		"list is filtered, not refused":           {user("nobody").Obj(), workloadSvc + "ListWorkloads", &meridianv1.ListWorkloadsRequest{Queue: "globex"}, CodeOK, "queue globex"},
		"watch is filtered":                       {user("nobody").Obj(), workloadSvc + "WatchWorkloads", nil, CodeOK, ""},
		"update mask weight on own tenant":        {bob, queueSvc + "UpdateQueue", update("acme", "weight"), CodePermissionDenied, ""},
		"update mask description on own tenant":   {bob, queueSvc + "UpdateQueue", update("acme", "description", "path", "revision"), CodeOK, ""},
		"update mask quotas sub-path on a team":   {bob, queueSvc + "UpdateQueue", update("acme/vision", "quotas.nominal_milli_gpus"), CodeOK, ""},
		"update without mask on own tenant":       {bob, queueSvc + "UpdateQueue", update("acme"), CodePermissionDenied, ""},
		"update an unknown mask field":            {user("lena").In("vision-leads").Obj(), queueSvc + "UpdateQueue", update("acme/vision/train", "labels"), CodePermissionDenied, ""},
		"create a child":                          {bob, queueSvc + "CreateQueue", &meridianv1.CreateQueueRequest{Queue: &meridianv1.Queue{Path: "acme/speech"}}, CodeOK, "queue acme/speech"},
		"get a hidden queue":                      {bob, queueSvc + "GetQueue", &meridianv1.GetQueueRequest{Path: "globex"}, CodeNotFound, ""},
		"delete a child":                          {bob, queueSvc + "DeleteQueue", &meridianv1.DeleteQueueRequest{Path: "acme/nlp"}, CodeOK, ""},
		"list queues":                             {bob, queueSvc + "ListQueues", &meridianv1.ListQueuesRequest{Prefix: "acme"}, CodeOK, ""},
		"drain needs clusters.manage":             {bob, clusterSvc + "DrainCluster", &meridianv1.DrainClusterRequest{Id: "c1"}, CodePermissionDenied, "cluster c1"},
		"resume with clusters.manage":             {user("opal").In("ops").Obj(), clusterSvc + "ResumeCluster", &meridianv1.ResumeClusterRequest{Id: "c1"}, CodeOK, "cluster c1"},
		"get cluster":                             {bob, clusterSvc + "GetCluster", &meridianv1.GetClusterRequest{Id: "c1"}, CodeOK, ""},
		"leader":                                  {bob, adminSvc + "GetLeader", &meridianv1.GetLeaderRequest{}, CodeOK, ""},
		"health, anonymous":                       {anonymous().Obj(), MethodHealthCheck, &healthpb.HealthCheckRequest{}, CodeOK, ""},
		"health watch, anonymous":                 {anonymous().Obj(), MethodHealthWatch, nil, CodeOK, ""},
		"reflection, anonymous":                   {anonymous().Obj(), MethodReflectionV1, nil, CodeUnauthenticated, ""},
		"reflection, authenticated":               {user("nobody").Obj(), MethodReflectionV1Alpha, nil, CodeOK, ""},
		"admin health, anonymous":                 {anonymous().Obj(), adminSvc + "GetHealth", &meridianv1.GetHealthRequest{}, CodeUnauthenticated, ""},
		"unknown method":                          {user("root").Obj(), "/meridian.v1.WorkloadService/Nuke", nil, CodePermissionDenied, ""},
		"unknown method, anonymous":               {anonymous().Obj(), "/x.Y/Z", nil, CodePermissionDenied, ""},
		"wrong message type fails closed":         {user("root").Obj(), queueSvc + "GetQueue", &meridianv1.GetWorkloadRequest{Id: "x"}, CodePermissionDenied, ""},
		"nil message on a unary rule":             {user("root").Obj(), queueSvc + "GetQueue", nil, CodePermissionDenied, ""},
		"list tokens":                             {user("alice").Obj(), MethodListAPITokens, nil, CodeOK, ""},
		"mint a token":                            {user("mia").In("minters").Obj(), MethodCreateAPIToken, mint("mia", []string{"minters"}, "workloads.view_all"), CodeOK, ""},
		"mint a token acting as another user":     {user("mia").In("minters").Obj(), MethodCreateAPIToken, mint("root", nil), CodePermissionDenied, ""},
		"mint a token in a group not held":        {user("mia").In("minters").Obj(), MethodCreateAPIToken, mint("", []string{"platform"}), CodePermissionDenied, ""},
		"mint a token with a permission not held": {user("mia").In("minters").Obj(), MethodCreateAPIToken, mint("", nil, "admin"), CodePermissionDenied, ""},
		"admin mints for anyone":                  {user("root").Obj(), MethodCreateAPIToken, mint("bob", []string{"acme-admins"}, "admin"), CodeOK, ""},
		"mint with a wrong message":               {user("root").Obj(), MethodCreateAPIToken, &healthpb.HealthListRequest{}, CodePermissionDenied, ""},
		"revoke extracts the id":                  {user("alice").Obj(), MethodRevokeAPIToken, &meridianv1.RevokeAPITokenRequest{Id: "tok-alice"}, CodeOK, "token tok-alice"},
		"revoke another's":                        {user("alice").In("minters").Obj(), MethodRevokeAPIToken, &meridianv1.RevokeAPITokenRequest{Id: "tok-bob"}, CodeNotFound, ""},
		"whoami":                                  {user("nobody").Obj(), adminSvc + "WhoAmI", &meridianv1.WhoAmIRequest{}, CodeOK, ""},
		"audit events need audit.read":            {bob, MethodListAuditEvents, nil, CodePermissionDenied, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := a.Bind(tc.s).AuthorizeMethod(tc.method, tc.req, r)
			if d.Code != tc.want {
				t.Fatalf("got %s, want %s: %s | %s", d.Code, tc.want, d.Reason, d.Detail())
			}
			if tc.target != "" && d.Target.String() != tc.target {
				t.Errorf("target %q, want %q", d.Target.String(), tc.target)
			}
			if gc := d.GRPCCode(); (gc == 0) != d.Allowed {
				t.Errorf("gRPC code %v for allowed=%v", gc, d.Allowed)
			}
		})
	}
	// OwnOnly on ListAPITokens: everyone but admin lists only their own.
	if d := a.Bind(user("alice").In("minters").Obj()).AuthorizeMethod(MethodListAPITokens, nil, r); !d.OwnOnly {
		t.Error("a tokens.create holder must list only its own tokens")
	}
	if d := a.Bind(user("root").Obj()).AuthorizeMethod(MethodListAPITokens, nil, r); d.OwnOnly {
		t.Error("admin lists every token")
	}
}
