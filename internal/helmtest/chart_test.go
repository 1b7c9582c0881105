package helmtest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meridian-gpu/meridian/connectors/kubernetes"
	"github.com/meridian-gpu/meridian/internal/repo"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

const (
	release   = "agent"
	releaseNS = "meridian"
)

// needHelm returns a Helm for charts/meridian-agent, or skips (fails with
// MERIDIAN_REQUIRE_HELM=1) when the helm binary is missing.
func needHelm(t *testing.T) Helm {
	t.Helper()
	bin, err := FindHelm()
	if err != nil {
		if os.Getenv("MERIDIAN_REQUIRE_HELM") == "1" {
			t.Fatalf("MERIDIAN_REQUIRE_HELM=1 and %v", err)
		}
		t.Skipf("SKIPPING Helm chart test: %v (set MERIDIAN_REQUIRE_HELM=1 to make this a failure)", err)
	}
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	return Helm{Bin: bin, Chart: filepath.Join(root, "charts", "meridian-agent")}
}

// minimal returns the fewest values the chart accepts, with overrides
// merged in (one level deep for maps).
func minimal(over map[string]any) map[string]any {
	return mergeValues(map[string]any{
		"clusterID": "k8s-east",
		"hub":       map[string]any{"natsURL": "nats://meridian-hub.meridian:4222"},
	}, over)
}

// mergeValues returns base with over merged in: a map merges into the map
// it replaces one level deep, anything else replaces; nil is ignored.
func mergeValues(v, over map[string]any) map[string]any {
	for k, x := range over {
		if x == nil {
			continue
		}
		if m, ok := x.(map[string]any); ok {
			if m == nil {
				continue
			}
			if old, ok := v[k].(map[string]any); ok {
				merged := maps.Clone(old)
				maps.Copy(merged, m)
				v[k] = merged
				continue
			}
		}
		v[k] = x
	}
	return v
}

func render(t *testing.T, h Helm, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	return renderRelease(t, h, release, values)
}

// renderRelease is helm template of h's chart as release rel, parsed.
func renderRelease(t *testing.T, h Helm, rel string, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := h.Template(ctx, rel, releaseNS, values)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	objs, err := Objects(out)
	if err != nil {
		t.Fatalf("rendered manifests: %v", err)
	}
	return objs
}

// typed converts the one object of kind (and name, when not empty) into out.
func typed(t *testing.T, objs []*unstructured.Unstructured, kind string, out any) *unstructured.Unstructured {
	t.Helper()
	var found *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			if found != nil {
				t.Fatalf("two %s objects rendered: %s and %s", kind, found.GetName(), o.GetName())
			}
			found = o
		}
	}
	if found == nil {
		t.Fatalf("no %s rendered", kind)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(found.Object, out); err != nil {
		t.Fatalf("%s %s: %v", kind, found.GetName(), err)
	}
	return found
}

// ruleSet flattens rules into "group/resource:verb" strings, so rule sets
// compare regardless of how verbs and resources are grouped into rules.
func ruleSet(rules []rbacv1.PolicyRule) []string {
	set := map[string]bool{}
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					set[g+"/"+res+":"+v] = true
				}
			}
		}
		for _, u := range r.NonResourceURLs {
			for _, v := range r.Verbs {
				set["url:"+u+":"+v] = true
			}
		}
		if len(r.ResourceNames) > 0 {
			set["resourceNames:"+strings.Join(r.ResourceNames, ",")] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

func TestLintPasses(t *testing.T) {
	h := needHelm(t)
	for name, over := range map[string]map[string]any{
		"minimal": nil,
		"everything": {
			"hub": map[string]any{"credentials": map[string]any{"user": "agent", "password": "p@ss/word"}},
			"connector": map[string]any{
				"namespace": "ml", "fractionalModes": []any{"mig", "hami"}, "sharedReplicas": 4,
				"gang": "coscheduling", "nodeSelector": map[string]any{"pool": "gpu"},
				"tolerations": []any{"nvidia.com/gpu"}, "labels": map[string]any{"region": "eu"},
			},
			"nodeSelector": map[string]any{"kubernetes.io/os": "linux"},
			"tolerations":  []any{map[string]any{"key": "infra", "operator": "Exists"}},
		},
		"kueue": {"connector": map[string]any{"gang": "kueue", "kueueQueue": "team-a"}},
		"NATS creds and mutual TLS": {"hub": map[string]any{"natsURL": "tls://hub:4222",
			"auth": map[string]any{"existingSecret": "nats-cred"}, "tls": map[string]any{"existingSecret": "nats-tls", "clientCert": true}}},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			out, err := h.Lint(ctx, minimal(over))
			if err != nil {
				t.Fatalf("helm lint: %v", err)
			}
			if !strings.Contains(string(out), "0 chart(s) failed") {
				t.Fatalf("helm lint did not report success:\n%s", out)
			}
		})
	}
}

func TestRenderedRBACIsExactlyRBACRules(t *testing.T) {
	h := needHelm(t)
	for name, tc := range map[string]struct {
		connector map[string]any
		cfg       kubernetes.Config
		jobsNS    string
	}{
		"defaults":                  {nil, kubernetes.Config{}, releaseNS},
		"coscheduling":              {map[string]any{"gang": "coscheduling"}, kubernetes.Config{Gang: kubernetes.GangCoscheduling}, releaseNS},
		"kueue":                     {map[string]any{"gang": "kueue", "kueueQueue": "q"}, kubernetes.Config{Gang: kubernetes.GangKueue, KueueQueue: "q"}, releaseNS},
		"jobs in another namespace": {map[string]any{"namespace": "ml", "fractionalModes": []any{"kai"}}, kubernetes.Config{Namespace: "ml", FractionalModes: []string{"kai"}}, "ml"},
	} {
		t.Run(name, func(t *testing.T) {
			objs := render(t, h, minimal(map[string]any{"connector": tc.connector}))
			wantCluster, wantNS := kubernetes.RBACRules(tc.cfg)

			var cr rbacv1.ClusterRole
			typed(t, objs, "ClusterRole", &cr)
			if got, want := ruleSet(cr.Rules), ruleSet(wantCluster); !slices.Equal(got, want) {
				t.Errorf("ClusterRole rules = %v, RBACRules cluster = %v", got, want)
			}
			var role rbacv1.Role
			typed(t, objs, "Role", &role)
			if got, want := ruleSet(role.Rules), ruleSet(wantNS); !slices.Equal(got, want) {
				t.Errorf("Role rules = %v, RBACRules namespaced = %v", got, want)
			}
			if role.Namespace != tc.jobsNS {
				t.Errorf("Role namespace = %q, want the Jobs namespace %q", role.Namespace, tc.jobsNS)
			}

			var sa corev1.ServiceAccount
			typed(t, objs, "ServiceAccount", &sa)
			subject := rbacv1.Subject{Kind: "ServiceAccount", Name: sa.Name, Namespace: releaseNS}
			var crb rbacv1.ClusterRoleBinding
			typed(t, objs, "ClusterRoleBinding", &crb)
			if crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != cr.Name || !slices.Equal(crb.Subjects, []rbacv1.Subject{subject}) {
				t.Errorf("ClusterRoleBinding binds %+v to %+v, want ClusterRole %s to %+v", crb.RoleRef, crb.Subjects, cr.Name, subject)
			}
			var rb rbacv1.RoleBinding
			typed(t, objs, "RoleBinding", &rb)
			if rb.Namespace != tc.jobsNS || rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name || !slices.Equal(rb.Subjects, []rbacv1.Subject{subject}) {
				t.Errorf("RoleBinding %s/%s binds %+v to %+v, want Role %s to %+v in %s", rb.Namespace, rb.Name, rb.RoleRef, rb.Subjects, role.Name, subject, tc.jobsNS)
			}
			var dep appsv1.Deployment
			typed(t, objs, "Deployment", &dep)
			if got := dep.Spec.Template.Spec.ServiceAccountName; got != sa.Name {
				t.Errorf("Deployment runs as ServiceAccount %q, want %q", got, sa.Name)
			}
		})
	}
}

func TestRBACCanBeLeftOut(t *testing.T) {
	h := needHelm(t)
	objs := render(t, h, minimal(map[string]any{"rbac": map[string]any{"create": false}}))
	for _, o := range objs {
		if strings.HasPrefix(o.GetAPIVersion(), "rbac.authorization.k8s.io/") {
			t.Errorf("rbac.create=false still renders %s %s", o.GetKind(), o.GetName())
		}
	}
}

// flagsOf returns the agent container's args as flag -> values.
func flagsOf(t *testing.T, objs []*unstructured.Unstructured) (map[string][]string, *appsv1.Deployment) {
	t.Helper()
	var dep appsv1.Deployment
	typed(t, objs, "Deployment", &dep)
	if n := len(dep.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("Deployment has %d containers, want 1", n)
	}
	flags := map[string][]string{}
	for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || !strings.HasPrefix(k, "--") {
			t.Fatalf("arg %q: want --flag=value", a)
		}
		flags[k] = append(flags[k], v)
	}
	return flags, &dep
}

// configOf builds the connector config the agent would build from flags
// (the same mapping as cmd/meridian-agent) so that it can be validated.
func configOf(flags map[string][]string) kubernetes.Config {
	one := func(k string) string {
		if v := flags[k]; len(v) > 0 {
			return v[len(v)-1]
		}
		return ""
	}
	kv := func(k string) map[string]string {
		out := map[string]string{}
		for _, s := range flags[k] {
			a, b, _ := strings.Cut(s, "=")
			out[a] = b
		}
		return out
	}
	cfg := kubernetes.Config{
		Namespace: one("--k8s-namespace"), ClusterID: one("--cluster-id"), RackLabel: one("--k8s-rack-label"),
		Gang: one("--k8s-gang"), KueueQueue: one("--k8s-kueue-queue"), KAIQueue: one("--k8s-kai-queue"),
		NodeSelector: kv("--k8s-node-selector"), Classes: kv("--k8s-class"), Labels: kv("--label"),
	}
	if m := one("--k8s-fractional-modes"); m != "" {
		cfg.FractionalModes = strings.Split(m, ",")
	}
	fmt.Sscan(one("--k8s-shared-replicas"), &cfg.SharedReplicas)
	return cfg
}

func TestDeploymentCarriesTheSettings(t *testing.T) {
	h := needHelm(t)
	objs := render(t, h, minimal(map[string]any{
		"connector": map[string]any{
			"namespace": "ml", "rackLabel": "example.com/rack", "fractionalModes": []any{"mig", "time-slicing"},
			"sharedReplicas": 4, "gang": "kueue", "kueueQueue": "team-a", "kaiQueue": "research",
			"nodeSelector": map[string]any{"pool": "gpu"}, "tolerations": []any{"nvidia.com/gpu", "dedicated"},
			"classes": map[string]any{"NVIDIA-H100-80GB-HBM3": "h100"}, "labels": map[string]any{"region": "eu"},
		},
		"agent":        map[string]any{"metricsPort": 9100, "heartbeatInterval": "3s", "launchParallelism": 4},
		"nodeSelector": map[string]any{"kubernetes.io/os": "linux"},
		"affinity":     map[string]any{"nodeAffinity": map[string]any{}},
		"tolerations":  []any{map[string]any{"key": "infra", "operator": "Exists"}},
		"resources":    map[string]any{"limits": map[string]any{"memory": "300Mi"}},
	}))
	flags, dep := flagsOf(t, objs)
	for flag, want := range map[string][]string{
		"--connector":            {"kubernetes"},
		"--cluster-id":           {"k8s-east"},
		"--nats-url":             {"nats://meridian-hub.meridian:4222"},
		"--k8s-namespace":        {"ml"},
		"--k8s-rack-label":       {"example.com/rack"},
		"--k8s-fractional-modes": {"mig,time-slicing"},
		"--k8s-shared-replicas":  {"4"},
		"--k8s-gang":             {"kueue"},
		"--k8s-kueue-queue":      {"team-a"},
		"--k8s-kai-queue":        {"research"},
		"--k8s-tolerate":         {"nvidia.com/gpu,dedicated"},
		"--k8s-node-selector":    {"pool=gpu"},
		"--k8s-class":            {"NVIDIA-H100-80GB-HBM3=h100"},
		"--label":                {"region=eu"},
		"--metrics-addr":         {":9100"},
		"--heartbeat-interval":   {"3s"},
		"--launch-parallelism":   {"4"},
	} {
		if got := flags[flag]; !slices.Equal(got, want) {
			t.Errorf("%s = %q, want %q", flag, got, want)
		}
	}
	if _, ok := flags["--kubeconfig"]; ok {
		t.Error("the agent is given a kubeconfig; in the cluster it must use its ServiceAccount")
	}
	if err := configOf(flags).Validate(); err != nil {
		t.Errorf("the connector refuses the rendered flags: %v", err)
	}
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/metrics" || p.HTTPGet.Port.String() != "metrics" {
			t.Errorf("%s probe = %+v, want GET /metrics on the metrics port", name, p)
		}
	}
	if sp := c.StartupProbe; sp != nil && sp.PeriodSeconds*sp.FailureThreshold < 90 {
		t.Errorf("startup probe gives up after %ds; the agent may take 90s (informer sync 1m + NATS 30s) to open /metrics", sp.PeriodSeconds*sp.FailureThreshold)
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "metrics" || c.Ports[0].ContainerPort != 9100 {
		t.Errorf("ports = %+v, want metrics on 9100", c.Ports)
	}
	if pod.NodeSelector["kubernetes.io/os"] != "linux" || pod.Affinity == nil || len(pod.Tolerations) != 1 || pod.Tolerations[0].Key != "infra" {
		t.Errorf("pod placement not carried: nodeSelector %v, affinity %v, tolerations %v", pod.NodeSelector, pod.Affinity, pod.Tolerations)
	}
	if got := c.Resources.Limits.Memory().String(); got != "300Mi" {
		t.Errorf("memory limit = %s, want 300Mi", got)
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 1 || dep.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("want one replica replaced with Recreate (two agents of one cluster id must never run at once), got %v %s", dep.Spec.Replicas, dep.Spec.Strategy.Type)
	}
}

func TestCredentials(t *testing.T) {
	h := needHelm(t)
	for name, tc := range map[string]struct {
		hub        map[string]any
		secret     string // Secret the URL comes from ("" = --nats-url flag)
		key        string
		createdURL string // the URL in the Secret the chart creates ("" = none created)
	}{
		"plain URL": {hub: map[string]any{"natsURL": "nats://hub:4222"}},
		"existing Secret": {
			hub:    map[string]any{"natsURL": "", "credentials": map[string]any{"existingSecret": "hub-creds", "existingSecretKey": "url"}},
			secret: "hub-creds", key: "url",
		},
		"inline user and password": {
			hub:    map[string]any{"natsURL": "tls://hub:4222", "credentials": map[string]any{"user": "agent", "password": "p@ss/word"}},
			secret: "agent-meridian-agent-nats", key: "nats-url", createdURL: "tls://agent:p%40ss%2Fword@hub:4222",
		},
		"inline token": {
			hub:    map[string]any{"natsURL": "nats://hub:4222", "credentials": map[string]any{"token": "s3cr3t"}},
			secret: "agent-meridian-agent-nats", key: "nats-url", createdURL: "nats://s3cr3t@hub:4222",
		},
	} {
		t.Run(name, func(t *testing.T) {
			objs := render(t, h, minimal(map[string]any{"hub": tc.hub}))
			flags, dep := flagsOf(t, objs)
			var env *corev1.EnvVar
			for i, e := range dep.Spec.Template.Spec.Containers[0].Env {
				if e.Name == "MERIDIAN_NATS_URL" {
					env = &dep.Spec.Template.Spec.Containers[0].Env[i]
				}
			}
			if tc.secret == "" {
				if env != nil || len(flags["--nats-url"]) != 1 {
					t.Fatalf("want --nats-url and no MERIDIAN_NATS_URL, got %q and %+v", flags["--nats-url"], env)
				}
			} else {
				if _, ok := flags["--nats-url"]; ok {
					t.Errorf("--nats-url %q given while the URL comes from a Secret (it would win over the env)", flags["--nats-url"])
				}
				if env == nil || env.ValueFrom == nil || env.ValueFrom.SecretKeyRef == nil ||
					env.ValueFrom.SecretKeyRef.Name != tc.secret || env.ValueFrom.SecretKeyRef.Key != tc.key {
					t.Fatalf("MERIDIAN_NATS_URL = %+v, want from Secret %s key %s", env, tc.secret, tc.key)
				}
			}
			var secrets []*unstructured.Unstructured
			for _, o := range objs {
				if o.GetKind() == "Secret" {
					secrets = append(secrets, o)
				}
			}
			if tc.createdURL == "" {
				if len(secrets) != 0 {
					t.Fatalf("a Secret was rendered: %s", secrets[0].GetName())
				}
				return
			}
			var s corev1.Secret
			typed(t, objs, "Secret", &s)
			if s.Name != tc.secret || s.StringData["nats-url"] != tc.createdURL {
				t.Errorf("Secret %s nats-url = %q, want %s with %q", s.Name, s.StringData["nats-url"], tc.secret, tc.createdURL)
			}
		})
	}
}

func TestBadValuesAreRefusedNamingTheField(t *testing.T) {
	h := needHelm(t)
	for name, tc := range map[string]struct {
		values map[string]any
		field  string // must appear in the error
	}{
		"chart defaults (no cluster id)": {map[string]any{}, "clusterID"},
		"cluster id with a dot":          {minimal(map[string]any{"clusterID": "east.1"}), "clusterID"},
		"cluster id too long":            {minimal(map[string]any{"clusterID": strings.Repeat("a", 64)}), "clusterID"},
		"no NATS URL":                    {minimal(map[string]any{"hub": map[string]any{"natsURL": ""}}), "hub.natsURL"},
		"NATS URL without scheme":        {minimal(map[string]any{"hub": map[string]any{"natsURL": "hub:4222"}}), "natsURL"},
		"unknown gang":                   {minimal(map[string]any{"connector": map[string]any{"gang": "volcano"}}), "gang"},
		"kueue without a queue":          {minimal(map[string]any{"connector": map[string]any{"gang": "kueue"}}), "kueueQueue"},
		"unknown fractional mode":        {minimal(map[string]any{"connector": map[string]any{"fractionalModes": []any{"mps"}}}), "fractionalModes"},
		"fractional mode twice":          {minimal(map[string]any{"connector": map[string]any{"fractionalModes": []any{"mig", "mig"}}}), "fractionalModes"},
		"shared replicas zero":           {minimal(map[string]any{"connector": map[string]any{"sharedReplicas": 0}}), "sharedReplicas"},
		"bad Jobs namespace":             {minimal(map[string]any{"connector": map[string]any{"namespace": "ML_Jobs"}}), "namespace"},
		"misspelt connector key":         {minimal(map[string]any{"connector": map[string]any{"gangs": "none"}}), "gangs"},
		"bad duration":                   {minimal(map[string]any{"agent": map[string]any{"heartbeatInterval": "5 seconds"}}), "heartbeatInterval"},
		"negative parallelism":           {minimal(map[string]any{"agent": map[string]any{"launchParallelism": -1}}), "launchParallelism"},
		"bad log level":                  {minimal(map[string]any{"agent": map[string]any{"logLevel": "verbose"}}), "logLevel"},
		"metrics port out of range":      {minimal(map[string]any{"agent": map[string]any{"metricsPort": 70000}}), "metricsPort"},
		"startup probe period zero":      {minimal(map[string]any{"startupProbe": map[string]any{"periodSeconds": 0}}), "startupProbe"},
		"bad pull policy":                {minimal(map[string]any{"image": map[string]any{"pullPolicy": "Sometimes"}}), "pullPolicy"},
		"secret and inline credentials": {minimal(map[string]any{"hub": map[string]any{"natsURL": "nats://hub:4222",
			"credentials": map[string]any{"existingSecret": "x", "token": "t"}}}), "hub.credentials"},
		"user without password": {minimal(map[string]any{"hub": map[string]any{"natsURL": "nats://hub:4222",
			"credentials": map[string]any{"user": "agent"}}}), "hub.credentials.password"},
		"credentials twice": {minimal(map[string]any{"hub": map[string]any{"natsURL": "nats://u:p@hub:4222",
			"credentials": map[string]any{"token": "t"}}}), "hub.natsURL"},
		"auth and inline credentials": {minimal(map[string]any{"hub": map[string]any{"natsURL": "nats://hub:4222",
			"credentials": map[string]any{"token": "t"}, "auth": map[string]any{"existingSecret": "s"}}}), "hub.auth.existingSecret"},
		"auth and URL credentials": {minimal(map[string]any{"hub": map[string]any{"natsURL": "nats://u:p@hub:4222",
			"auth": map[string]any{"existingSecret": "s"}}}), "hub.natsURL"},
		"unknown auth type": {minimal(map[string]any{"hub": map[string]any{"natsURL": "nats://hub:4222",
			"auth": map[string]any{"existingSecret": "s", "type": "jwt"}}}), "type"},
		"password without user": {minimal(map[string]any{"hub": map[string]any{"natsURL": "nats://hub:4222",
			"auth": map[string]any{"existingSecret": "s", "type": "password"}}}), "hub.auth.user"},
		"user with creds": {minimal(map[string]any{"hub": map[string]any{"natsURL": "nats://hub:4222",
			"auth": map[string]any{"existingSecret": "s", "user": "u"}}}), "hub.auth.user"},
		"bad auth Secret name": {minimal(map[string]any{"hub": map[string]any{"natsURL": "nats://hub:4222",
			"auth": map[string]any{"existingSecret": "Nats_Creds"}}}), "existingSecret"},
		"bad auth key": {minimal(map[string]any{"hub": map[string]any{"natsURL": "nats://hub:4222",
			"auth": map[string]any{"existingSecret": "s", "key": "a/b"}}}), "key"},
		"TLS Secret with nothing to mount": {minimal(map[string]any{"hub": map[string]any{"natsURL": "nats://hub:4222",
			"tls": map[string]any{"existingSecret": "t", "caKey": ""}}}), "hub.tls"},
		"client cert without TLS Secret": {minimal(map[string]any{"hub": map[string]any{"natsURL": "nats://hub:4222",
			"tls": map[string]any{"clientCert": true}}}), "hub.tls.clientCert"},
		"misspelt TLS key": {minimal(map[string]any{"hub": map[string]any{"natsURL": "nats://hub:4222",
			"tls": map[string]any{"existingSecret": "t", "caFile": "x"}}}), "caFile"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_, err := h.Template(ctx, release, releaseNS, tc.values)
			if err == nil {
				t.Fatalf("helm template accepted bad values %v", tc.values)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatal(err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error does not name %q:\n%v", tc.field, err)
			}
		})
	}
}

// copyChart copies the chart into a temporary directory where NOTES.txt
// becomes the named template "notes" and a ConfigMap carries its text, so
// that `helm template` renders it (it leaves NOTES.txt out, and parses
// every other template as YAML).
func copyChart(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "meridian-agent")
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if rel == filepath.Join("templates", "NOTES.txt") {
			rel = filepath.Join("templates", "_notes.tpl")
			b = append(append([]byte(`{{- define "notes" -}}`), b...), "{{- end }}"...)
			cm := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  notes: {{ include \"notes\" . | quote }}\n"
			if err := os.WriteFile(filepath.Join(dst, "templates", "notes.yaml"), []byte(cm), 0o644); err != nil {
				return err
			}
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatalf("copy chart: %v", err)
	}
	return dst
}

func TestNotesSummariseTheInstall(t *testing.T) {
	h := needHelm(t)
	h.Chart = copyChart(t, h.Chart)
	for name, tc := range map[string]struct {
		values map[string]any
		want   []string
		absent []string
	}{
		"defaults": {
			values: minimal(nil),
			want: []string{`cluster "k8s-east"`, "Hub NATS:     nats://meridian-hub.meridian:4222", "NATS auth:    none given", "NATS TLS:     not configured", "namespace meridian",
				"whole GPUs only", "get, list, watch on nodes and pods", "deployment/agent-meridian-agent"},
			absent: []string{"podgroups", "NOT created"},
		},
		"coscheduling in another namespace, secret": {
			values: minimal(map[string]any{
				"hub":       map[string]any{"natsURL": "", "credentials": map[string]any{"existingSecret": "hub"}},
				"connector": map[string]any{"namespace": "ml", "gang": "coscheduling", "fractionalModes": []any{"mig", "hami"}},
				"rbac":      map[string]any{"create": false},
			}),
			want:   []string{"from Secret hub (key nats-url)", "namespace ml", "Gang:         coscheduling", "mig, hami", "podgroups", "NOT created"},
			absent: []string{"nats://"},
		},
		"NATS auth and TLS from Secrets": {
			values: minimal(map[string]any{"hub": map[string]any{"natsURL": "tls://hub:4222",
				"auth": map[string]any{"existingSecret": "nats-cred", "type": "token"},
				"tls":  map[string]any{"existingSecret": "nats-tls", "clientCert": true}}}),
			want: []string{"NATS auth:    token from Secret nats-cred (key token), mounted read-only",
				"NATS TLS:     from Secret nats-tls, CA ca.crt, client certificate tls.crt"},
			absent: []string{"none given", "not configured"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			out, err := h.run(ctx, tc.values, "template", release, h.Chart, "--namespace", releaseNS, "--show-only", "templates/notes.yaml")
			if err != nil {
				t.Fatalf("render NOTES.txt: %v", err)
			}
			objs, err := Objects(out)
			if err != nil || len(objs) != 1 {
				t.Fatalf("rendered NOTES: %d objects, %v", len(objs), err)
			}
			notes, _, _ := unstructured.NestedString(objs[0].Object, "data", "notes")
			if notes == "" {
				t.Fatal("NOTES.txt rendered empty")
			}
			for _, w := range tc.want {
				if !strings.Contains(notes, w) {
					t.Errorf("NOTES lack %q:\n%s", w, notes)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(notes, a) {
					t.Errorf("NOTES contain %q:\n%s", a, notes)
				}
			}
		})
	}
}

func TestNATSAuthAndTLSAreMountedAndPassed(t *testing.T) {
	h := needHelm(t)
	const authDir, tlsDir = "/etc/meridian/nats-auth/", "/etc/meridian/nats-tls/"
	for name, tc := range map[string]struct {
		hub       map[string]any
		flags     map[string]string // the --nats-* flags besides --nats-url, exactly
		authItems []string          // keys mounted from the auth Secret (nil: no volume)
		tlsItems  []string
	}{
		"nothing": {hub: map[string]any{}, flags: map[string]string{}},
		"creds and CA": {
			hub:       map[string]any{"auth": map[string]any{"existingSecret": "nats-cred"}, "tls": map[string]any{"existingSecret": "nats-tls"}},
			flags:     map[string]string{"--nats-creds": authDir + "nats.creds", "--nats-tls-ca": tlsDir + "ca.crt"},
			authItems: []string{"nats.creds"}, tlsItems: []string{"ca.crt"},
		},
		"token with its own key, mutual TLS": {
			hub: map[string]any{"natsURL": "tls://hub:4222", "auth": map[string]any{"existingSecret": "nats-cred", "type": "token", "key": "agent-token"},
				"tls": map[string]any{"existingSecret": "nats-tls", "clientCert": true}},
			flags: map[string]string{"--nats-token-file": authDir + "agent-token", "--nats-tls-ca": tlsDir + "ca.crt",
				"--nats-tls-cert": tlsDir + "tls.crt", "--nats-tls-key": tlsDir + "tls.key"},
			authItems: []string{"agent-token"}, tlsItems: []string{"ca.crt", "tls.crt", "tls.key"},
		},
		"user and password": {
			hub:   map[string]any{"auth": map[string]any{"existingSecret": "nats-cred", "type": "password", "user": "east"}},
			flags: map[string]string{"--nats-user": "east", "--nats-password-file": authDir + "password"}, authItems: []string{"password"},
		},
		"nkey, client certificate only": {
			hub: map[string]any{"auth": map[string]any{"existingSecret": "nats-cred", "type": "nkey"},
				"tls": map[string]any{"existingSecret": "nats-tls", "caKey": "", "clientCert": true, "certKey": "c.pem", "keyKey": "k.pem"}},
			flags:     map[string]string{"--nats-nkey": authDir + "nkey.seed", "--nats-tls-cert": tlsDir + "c.pem", "--nats-tls-key": tlsDir + "k.pem"},
			authItems: []string{"nkey.seed"}, tlsItems: []string{"c.pem", "k.pem"},
		},
		"URL from a Secret, TLS": {
			hub:   map[string]any{"natsURL": "", "credentials": map[string]any{"existingSecret": "hub-url"}, "tls": map[string]any{"existingSecret": "nats-tls"}},
			flags: map[string]string{"--nats-tls-ca": tlsDir + "ca.crt"}, tlsItems: []string{"ca.crt"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			objs := render(t, h, minimal(map[string]any{"hub": tc.hub}))
			flags, dep := flagsOf(t, objs)

			// The --nats-* flags are exactly the expected ones, and the agent's
			// own flag set (natsbus.AuthFlags) knows each of them.
			got := map[string]string{}
			var natsArgs []string
			for k, v := range flags {
				if strings.HasPrefix(k, "--nats-") && k != "--nats-url" {
					if len(v) != 1 {
						t.Errorf("%s given %d times", k, len(v))
					}
					got[k] = v[0]
					natsArgs = append(natsArgs, k+"="+v[0])
				}
			}
			if !maps.Equal(got, tc.flags) {
				t.Errorf("NATS flags = %v, want %v", got, tc.flags)
			}
			fs := flag.NewFlagSet("meridian-agent", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			new(natsbus.AuthFlags).Register(fs)
			if err := fs.Parse(natsArgs); err != nil {
				t.Errorf("the agent's NATS flags refuse the rendered ones: %v", err)
			}

			pod := dep.Spec.Template.Spec
			vols := map[string]corev1.Volume{}
			for _, v := range pod.Volumes {
				vols[v.Name] = v
			}
			mounts := map[string]corev1.VolumeMount{}
			for _, m := range pod.Containers[0].VolumeMounts {
				mounts[m.Name] = m
			}
			for _, want := range []struct {
				vol, dir, secret string
				items            []string
			}{
				{"nats-auth", authDir, "nats-cred", tc.authItems},
				{"nats-tls", tlsDir, "nats-tls", tc.tlsItems},
			} {
				v, hasVol := vols[want.vol]
				m, hasMount := mounts[want.vol]
				if want.items == nil {
					if hasVol || hasMount {
						t.Errorf("volume %s rendered (%+v, %+v) without its Secret", want.vol, v, m)
					}
					continue
				}
				if !hasVol || v.Secret == nil || v.Secret.SecretName != want.secret {
					t.Fatalf("volume %s = %+v, want Secret %s", want.vol, v, want.secret)
				}
				if mode := v.Secret.DefaultMode; mode == nil || *mode != 0o444 {
					t.Errorf("volume %s mode %s, want 0444 (readable by the non-root agent, writable by none)", want.vol, fmtMode(mode))
				}
				var keys []string
				for _, it := range v.Secret.Items {
					if it.Path != it.Key {
						t.Errorf("volume %s maps key %s to %s", want.vol, it.Key, it.Path)
					}
					keys = append(keys, it.Key)
				}
				if !slices.Equal(keys, want.items) {
					t.Errorf("volume %s mounts keys %v, want only %v", want.vol, keys, want.items)
				}
				if !hasMount || !m.ReadOnly || m.MountPath+"/" != want.dir {
					t.Errorf("mount of %s = %+v, want read-only at %s", want.vol, m, want.dir)
				}
			}
			// Every file a flag names is one the pod mounts.
			for f, p := range tc.flags {
				if !strings.HasPrefix(p, "/") {
					continue
				}
				dir, key := filepath.Dir(p)+"/", filepath.Base(p)
				items := map[string][]string{authDir: tc.authItems, tlsDir: tc.tlsItems}[dir]
				if !slices.Contains(items, key) {
					t.Errorf("%s=%s names a file that is not mounted", f, p)
				}
			}

			// RBAC does not change: the agent never reads Secrets, the
			// kubelet mounts them.
			var role rbacv1.Role
			typed(t, objs, "Role", &role)
			var cr rbacv1.ClusterRole
			typed(t, objs, "ClusterRole", &cr)
			wantCluster, wantNS := kubernetes.RBACRules(kubernetes.Config{})
			if !slices.Equal(ruleSet(role.Rules), ruleSet(wantNS)) || !slices.Equal(ruleSet(cr.Rules), ruleSet(wantCluster)) {
				t.Errorf("RBAC changed with NATS auth values: Role %v, ClusterRole %v", ruleSet(role.Rules), ruleSet(cr.Rules))
			}
		})
	}
}

func fmtMode(m *int32) string {
	if m == nil {
		return "unset"
	}
	return fmt.Sprintf("%#o", *m)
}

// TestDefaultImageIsTheOneMakeImageBuilds ties the chart's default image to
// the Dockerfile and the Makefile's image target: same repository, tag =
// appVersion, the binary on PATH and the same non-root user.
func TestDefaultImageIsTheOneMakeImageBuilds(t *testing.T) {
	h := needHelm(t)
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var appVersion string
	for _, line := range strings.Split(read("charts/meridian-agent/Chart.yaml"), "\n") {
		if v, ok := strings.CutPrefix(line, "appVersion:"); ok {
			appVersion = strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	if appVersion == "" {
		t.Fatal("Chart.yaml has no appVersion")
	}
	_, dep := flagsOf(t, render(t, h, minimal(nil)))
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]

	makefile := read("Makefile")
	var repo string
	for _, line := range strings.Split(makefile, "\n") {
		if v, ok := strings.CutPrefix(line, "IMAGE_REPO ?="); ok {
			repo = strings.TrimSpace(v)
		}
	}
	if want := repo + "/meridian-agent:" + appVersion; repo == "" || c.Image != want {
		t.Errorf("chart image %q, want %q (Makefile IMAGE_REPO + /meridian-agent + appVersion)", c.Image, want)
	}
	if !strings.Contains(makefile, "--target $$t") || !strings.Contains(makefile, "for t in agent hub") {
		t.Error("make image does not build the Dockerfile's agent and hub targets")
	}
	dockerfile := read("Dockerfile")
	for _, want := range []string{
		"AS agent", "AS hub", "CGO_ENABLED=0",
		"COPY --from=build /out/meridian-agent /usr/local/bin/" + c.Command[0],
		fmt.Sprintf("USER %d:%d", *pod.SecurityContext.RunAsUser, *pod.SecurityContext.RunAsGroup),
		"distroless/static",
	} {
		if !strings.Contains(dockerfile, want) {
			t.Errorf("Dockerfile lacks %q (the chart runs %v as %d)", want, c.Command, *pod.SecurityContext.RunAsUser)
		}
	}
}
