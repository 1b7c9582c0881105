package helmtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	kubeclient "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/meridian-gpu/meridian/connectors/kubernetes"
	"github.com/meridian-gpu/meridian/internal/k8slocal"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// The apiserver tests use the loopback control plane of scripts/k8s-up.sh
// exactly as connectors/kubernetes does: started (never built) by the
// test with MERIDIAN_K8S_NO_BUILD=1, found through its env file, skipped
// loudly when not root or not built unless MERIDIAN_REQUIRE_K8S=1.

var (
	k8sOnce sync.Once
	k8sRest *rest.Config
	k8sErr  error
)

func skipOrFailK8s(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("MERIDIAN_REQUIRE_K8S") == "1" {
		t.Fatalf("MERIDIAN_REQUIRE_K8S=1 and %s", msg)
	}
	t.Skipf("SKIPPING real-Kubernetes test: %s (set MERIDIAN_REQUIRE_K8S=1 to make this a failure)", msg)
}

func needK8s(t *testing.T) *rest.Config {
	t.Helper()
	if testing.Short() {
		skipOrFailK8s(t, "-short: not starting the Kubernetes control plane")
	}
	if os.Geteuid() != 0 {
		skipOrFailK8s(t, "not root: the local control plane (scripts/k8s-up.sh) needs root")
	}
	k8sOnce.Do(func() {
		// Started (never built) by the test; see k8slocal.Up.
		var local *k8slocal.Local
		if local, k8sErr = k8slocal.Up(context.Background(), false, nil); k8sErr == nil {
			k8sRest = local.REST
		}
	})
	if k8sErr != nil {
		if errors.Is(k8sErr, k8slocal.ErrNotBuilt) {
			skipOrFailK8s(t, k8sErr.Error())
		}
		t.Fatalf("local Kubernetes: %v", k8sErr)
	}
	return k8sRest
}

// applier server-side applies unstructured objects.
type applier struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newApplier(rc *rest.Config) (*applier, error) {
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(rc)
	if err != nil {
		return nil, err
	}
	return &applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memCache{dc})}, nil
}

// memCache adapts a discovery client to the cached interface the deferred
// mapper wants, without caching on disk.
type memCache struct{ *discovery.DiscoveryClient }

func (memCache) Fresh() bool { return true }
func (memCache) Invalidate() {}

func (a *applier) resource(o *unstructured.Unstructured) (dynamic.ResourceInterface, bool, error) {
	gvk := o.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", gvk, err)
	}
	if m.Scope.Name() == "namespace" {
		if o.GetNamespace() == "" {
			return nil, true, fmt.Errorf("%s %s: namespaced but rendered without metadata.namespace", gvk.Kind, o.GetName())
		}
		return a.dyn.Resource(m.Resource).Namespace(o.GetNamespace()), true, nil
	}
	return a.dyn.Resource(m.Resource), false, nil
}

// apply server-side applies o (dry-run=server when dryRun).
func (a *applier) apply(ctx context.Context, o *unstructured.Unstructured, dryRun bool) error {
	ri, _, err := a.resource(o)
	if err != nil {
		return err
	}
	opts := metav1.ApplyOptions{FieldManager: "meridian-helmtest", Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if _, err := ri.Apply(ctx, o.GetName(), o, opts); err != nil {
		return fmt.Errorf("server-side apply %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
	}
	return nil
}

func (a *applier) delete(ctx context.Context, o *unstructured.Unstructured) error {
	ri, _, err := a.resource(o)
	if err != nil {
		return err
	}
	if err := ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// access is one question to the authorizer.
type access struct {
	group, resource, verb, namespace string
}

func (a access) String() string {
	where := "cluster-wide"
	if a.namespace != "" {
		where = "in " + a.namespace
	}
	return fmt.Sprintf("%s %s/%s %s", a.verb, a.group, a.resource, where)
}

// granted reports whether the connector's rules (cluster rules anywhere,
// namespaced rules in jobsNS) cover a.
func granted(a access, cluster, namespaced []rbacv1.PolicyRule, jobsNS string) bool {
	covers := func(rules []rbacv1.PolicyRule) bool {
		for _, r := range rules {
			if contains(r.APIGroups, a.group) && contains(r.Resources, a.resource) && contains(r.Verbs, a.verb) {
				return true
			}
		}
		return false
	}
	return covers(cluster) || (a.namespace == jobsNS && covers(namespaced))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s || x == "*" {
			return true
		}
	}
	return false
}

func TestAppliedChartGrantsExactlyWhatTheConnectorUses(t *testing.T) {
	h := needHelm(t)
	rc := rest.CopyConfig(needK8s(t))
	// Hundreds of SubjectAccessReviews: client-go's default 5 QPS would
	// make them take 45 s on their own.
	rc.QPS, rc.Burst = 200, 200
	kube, err := kubeclient.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ap, err := newApplier(rc)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		connector map[string]any
		hub       map[string]any
		cfg       kubernetes.Config
		otherJobs bool // the Jobs go to a namespace other than the release's
		launch    bool // also run the connector with the account's token
	}{
		"defaults": {cfg: kubernetes.Config{}, launch: true},
		// With NATS credentials and TLS mounted from Secrets: the apiserver
		// validates the volumes, and the RBAC stays exactly RBACRules.
		"coscheduling, jobs elsewhere, NATS creds and mutual TLS": {connector: map[string]any{"gang": "coscheduling"},
			hub: map[string]any{"natsURL": "tls://hub:4222", "auth": map[string]any{"existingSecret": "nats-cred"},
				"tls": map[string]any{"existingSecret": "nats-tls", "clientCert": true}},
			cfg: kubernetes.Config{Gang: kubernetes.GangCoscheduling}, otherJobs: true},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			base := fmt.Sprintf("mrd-helm-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
			relNS, jobsNS := base, base
			namespaces := []string{relNS}
			if tc.otherJobs {
				jobsNS = base + "-jobs"
				namespaces = append(namespaces, jobsNS)
			}
			for _, ns := range namespaces {
				if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
					t.Fatalf("create namespace %s: %v", ns, err)
				}
			}
			connector := map[string]any{"tolerations": []any{"kwok.x-k8s.io/node"}}
			for k, v := range tc.connector {
				connector[k] = v
			}
			if tc.otherJobs {
				connector["namespace"] = jobsNS
			}
			out, err := h.Template(ctx, release, relNS, minimal(map[string]any{"connector": connector, "hub": tc.hub}))
			if err != nil {
				t.Fatalf("helm template: %v", err)
			}
			objs, err := Objects(out)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				for _, o := range objs {
					if o.GetNamespace() == "" {
						if err := ap.delete(ctx, o); err != nil {
							t.Errorf("delete %s %s: %v", o.GetKind(), o.GetName(), err)
						}
					}
				}
				for _, ns := range namespaces {
					_ = kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
				}
			})
			var sa string
			for _, o := range objs {
				// The Deployment is only validated (dry-run=server): its pod
				// needs an image this control plane cannot run.
				if err := ap.apply(ctx, o, o.GetKind() == "Deployment"); err != nil {
					t.Fatal(err)
				}
				if o.GetKind() == "ServiceAccount" {
					sa = o.GetName()
				}
			}
			if sa == "" {
				t.Fatal("no ServiceAccount rendered")
			}

			// Ask the authorizer, as the ServiceAccount with its groups,
			// about every verb on the resources the agent could plausibly
			// touch, in its Jobs namespace, another namespace and
			// cluster-wide; the answer must be yes exactly where
			// RBACRules grants.
			user := "system:serviceaccount:" + relNS + ":" + sa
			groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + relNS, "system:authenticated"}
			cluster, namespaced := kubernetes.RBACRules(tc.cfg)
			verbs := []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
			type res struct{ group, resource string }
			nsRes := []res{{"", "pods"}, {"", "secrets"}, {"", "configmaps"}, {"", "services"}, {"", "serviceaccounts"},
				{"batch", "jobs"}, {"scheduling.x-k8s.io", "podgroups"}, {"apps", "deployments"}, {"rbac.authorization.k8s.io", "roles"}}
			var questions []access
			for _, v := range verbs {
				questions = append(questions, access{"", "nodes", v, ""}, access{"rbac.authorization.k8s.io", "clusterroles", v, ""})
				for _, r := range nsRes {
					for _, ns := range []string{jobsNS, "default", ""} {
						questions = append(questions, access{r.group, r.resource, v, ns})
					}
				}
			}
			// The questions go 8 at a time: the answers are independent.
			answers := make([]*authorizationv1.SubjectAccessReview, len(questions))
			errs := make([]error, len(questions))
			var wg sync.WaitGroup
			sem := make(chan struct{}, 8)
			start := time.Now()
			for i, q := range questions {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer func() { <-sem; wg.Done() }()
					answers[i], errs[i] = kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
						User: user, Groups: groups,
						ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: q.namespace, Verb: q.verb, Group: q.group, Resource: q.resource},
					}}, metav1.CreateOptions{})
				}()
			}
			wg.Wait()
			allowedN := 0
			for i, q := range questions {
				if errs[i] != nil {
					t.Fatalf("SubjectAccessReview %s: %v", q, errs[i])
				}
				want := granted(q, cluster, namespaced, jobsNS)
				if got := answers[i].Status.Allowed; got != want {
					t.Errorf("the chart's ServiceAccount may %s: %v, RBACRules says %v (%s)", q, got, want, answers[i].Status.Reason)
				}
				if answers[i].Status.Allowed {
					allowedN++
				}
			}
			// Spot checks that do not depend on granted() being right.
			for _, q := range []access{{"", "nodes", "delete", ""}, {"", "secrets", "get", ""}, {"", "secrets", "list", jobsNS}, {"batch", "jobs", "create", "default"}} {
				if granted(q, cluster, namespaced, jobsNS) {
					t.Errorf("RBACRules grants %s; the connector must never need it", q)
				}
			}
			if allowedN == 0 {
				t.Fatal("the ServiceAccount may do nothing at all: the bindings do not work")
			}
			t.Logf("%d of %d access questions allowed (asked in %s)", allowedN, len(questions), time.Since(start).Round(time.Millisecond))

			if tc.launch {
				runWithToken(ctx, t, kube, relNS, sa, jobsNS)
			}
		})
	}
}

// runWithToken runs the connector with only the ServiceAccount's token:
// inventory, a launch and a cancel must all work.
func runWithToken(ctx context.Context, t *testing.T, kube kubeclient.Interface, relNS, sa, jobsNS string) {
	t.Helper()
	exp := int64(600)
	tok, err := kube.CoreV1().ServiceAccounts(relNS).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s: %v", sa, err)
	}
	host := k8sRest.Host
	c, err := kubernetes.New(ctx, kubernetes.Config{
		REST:      &rest.Config{Host: host, BearerToken: tok.Status.Token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}},
		Namespace: jobsNS, ClusterID: "k8s-east",
		Tolerations: []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
	})
	if err != nil {
		t.Fatalf("connector with the chart's ServiceAccount: %v", err)
	}
	defer c.Close()
	inv, err := c.Inventory(ctx)
	if err != nil {
		t.Fatalf("inventory with the chart's ServiceAccount: %v", err)
	}
	if len(inv.Nodes) < 3 {
		t.Fatalf("inventory with the chart's ServiceAccount: %d nodes, want the 3 KWOK GPU nodes", len(inv.Nodes))
	}
	id := fmt.Sprintf("d-helm%d", time.Now().UnixNano())
	d := &agentv1.Dispatch{DispatchId: id, WorkloadId: "wl-" + id, Workload: &meridianv1.Workload{Id: "wl-" + id, Queue: "t/team/p",
		PodSets: []*meridianv1.PodSet{{Name: "w", Replicas: 1, Resources: &meridianv1.Resources{CpuMilli: 100, MemoryMib: 64}}}}}
	if err := c.Launch(ctx, d); err != nil {
		t.Fatalf("Launch with the chart's ServiceAccount: %v", err)
	}
	jobs, err := kube.BatchV1().Jobs(jobsNS).List(ctx, metav1.ListOptions{})
	if err != nil || len(jobs.Items) != 1 {
		t.Fatalf("after Launch, %d Jobs in %s (%v), want 1", len(jobs.Items), jobsNS, err)
	}
	if err := c.Cancel(ctx, id, false); err != nil {
		t.Fatalf("Cancel with the chart's ServiceAccount: %v", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := kube.BatchV1().Jobs(jobsNS).Get(ctx, jobs.Items[0].Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			t.Logf("with only the chart's ServiceAccount token: inventory of %d nodes, Job %s launched and cancelled", len(inv.Nodes), jobs.Items[0].Name)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Job %s still there 20s after Cancel (%v)", jobs.Items[0].Name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
