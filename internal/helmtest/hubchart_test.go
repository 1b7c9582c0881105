package helmtest

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/meridian-gpu/meridian/hub/authz"
	hubconfig "github.com/meridian-gpu/meridian/hub/config"
	cc "github.com/meridian-gpu/meridian/internal/componentconfig"
	"github.com/meridian-gpu/meridian/internal/repo"
)

// The hub chart's tests: the same checks as the agent chart's, for
// charts/meridian-hub, plus that the rendered configuration, arguments and
// environment load and validate as the hub's own loader does at start.

const hubRelease = "hub"

func needHubHelm(t *testing.T) Helm {
	t.Helper()
	h := needHelm(t)
	h.Chart = filepath.Join(filepath.Dir(h.Chart), "meridian-hub")
	return h
}

// hubMinimal returns the fewest values the chart accepts (the single-replica
// mode, plaintext behind a proxy), with overrides merged one level deep.
func hubMinimal(over map[string]any) map[string]any {
	return mergeValues(map[string]any{"api": map[string]any{"insecurePlaintext": true}}, over)
}

// hubHA is the several-replica topology with NATS auth and TLS and API TLS.
func hubHA(over map[string]any) map[string]any {
	v := map[string]any{
		"replicaCount": 3,
		"etcd":         map[string]any{"endpoints": []any{"http://etcd-0.etcd:2379", "http://etcd-1.etcd:2379"}},
		"nats": map[string]any{"url": "tls://nats.nats:4222", "auth": map[string]any{"existingSecret": "hub-nats", "type": "creds"},
			"tls": map[string]any{"existingSecret": "nats-tls", "clientCert": true}},
		"api": map[string]any{"tls": map[string]any{"existingSecret": "hub-tls", "clientCA": true}},
		"auth": map[string]any{"oidc": map[string]any{"issuers": []any{map[string]any{"issuerURL": "https://login.example.com",
			"audience": "meridian", "groupsPrefix": "corp:", "caSecret": "login-ca"}}},
			"authorization": map[string]any{"groupPermissions": map[string]any{"corp:ml-platform": []any{"admin"}}}},
	}
	maps.Copy(v, over)
	return v
}

func renderHub(t *testing.T, h Helm, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	return renderRelease(t, h, hubRelease, values)
}

func kinds(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetKind())
	}
	slices.Sort(out)
	return out
}

// hubPod returns the pod template of the StatefulSet or Deployment.
func hubPod(t *testing.T, objs []*unstructured.Unstructured) corev1.PodSpec {
	t.Helper()
	for _, o := range objs {
		switch o.GetKind() {
		case "StatefulSet":
			var s appsv1.StatefulSet
			typed(t, objs, "StatefulSet", &s)
			return s.Spec.Template.Spec
		case "Deployment":
			var d appsv1.Deployment
			typed(t, objs, "Deployment", &d)
			return d.Spec.Template.Spec
		}
	}
	t.Fatal("neither a StatefulSet nor a Deployment rendered")
	return corev1.PodSpec{}
}

func TestHubLintPasses(t *testing.T) {
	h := needHubHelm(t)
	for name, values := range map[string]map[string]any{
		"single replica": hubMinimal(nil),
		"several replicas, everything": hubHA(map[string]any{
			"ingress": map[string]any{"enabled": true, "host": "hub.example.com", "tlsSecret": "hub-ingress"},
			"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": true, "tokenSecret": map[string]any{"name": "prom", "key": "token"}},
				"prometheusRule": map[string]any{"enabled": true}},
			"networkPolicy": map[string]any{"enabled": true, "egress": []any{map[string]any{"ports": []any{map[string]any{"port": 2379}}}}},
		}),
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			out, err := h.Lint(ctx, values)
			if err != nil {
				t.Fatalf("helm lint: %v", err)
			}
			if !strings.Contains(string(out), "0 chart(s) failed") {
				t.Fatalf("helm lint did not report success:\n%s", out)
			}
		})
	}
}

func TestHubTopologies(t *testing.T) {
	h := needHubHelm(t)
	for name, tc := range map[string]struct {
		values   map[string]any
		kinds    []string
		replicas int32
	}{
		"single replica, embedded etcd and NATS": {hubMinimal(nil),
			[]string{"ConfigMap", "NetworkPolicy", "Service", "Service", "Service", "StatefulSet"}, 1},
		"several replicas, external etcd and NATS": {hubHA(nil),
			[]string{"ConfigMap", "Deployment", "NetworkPolicy", "PodDisruptionBudget", "Service", "Service"}, 3},
	} {
		t.Run(name, func(t *testing.T) {
			objs := renderHub(t, h, tc.values)
			if got := kinds(objs); !slices.Equal(got, tc.kinds) {
				t.Fatalf("rendered %v, want %v", got, tc.kinds)
			}
			// The hub never calls the Kubernetes API: no RBAC, no
			// ServiceAccount token.
			for _, o := range objs {
				if strings.HasPrefix(o.GetAPIVersion(), "rbac.authorization.k8s.io/") || o.GetKind() == "ServiceAccount" {
					t.Errorf("the hub chart renders %s %s; the hub needs no Kubernetes access", o.GetKind(), o.GetName())
				}
			}
			pod := hubPod(t, objs)
			if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
				t.Error("the pod mounts a ServiceAccount token it never uses")
			}
			if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
				t.Errorf("pod security context %+v, want non-root", sc)
			}
			c := pod.Containers[0]
			if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("container security context %+v, want a read-only root and no privilege escalation", sc)
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
				t.Errorf("resource requests %v, want cpu and memory", c.Resources.Requests)
			}
			for want, p := range map[string]*corev1.Probe{"/readyz": c.ReadinessProbe, "/healthz": c.LivenessProbe} {
				if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want || p.HTTPGet.Port.String() != "http" {
					t.Errorf("probe %+v, want GET %s on the http port", p, want)
				}
			}
			// Writable: only /data and /tmp.
			vols := map[string]corev1.Volume{}
			for _, v := range pod.Volumes {
				vols[v.Name] = v
			}
			for _, m := range c.VolumeMounts {
				if m.ReadOnly {
					continue
				}
				if m.MountPath != "/data" && m.MountPath != "/tmp" {
					t.Errorf("writable mount %s at %s", m.Name, m.MountPath)
				}
				if v, ok := vols[m.Name]; ok && v.EmptyDir == nil {
					t.Errorf("writable volume %s is not an emptyDir", m.Name)
				}
			}

			var svc corev1.Service
			for _, o := range objs {
				if o.GetKind() == "Service" && o.GetName() == hubRelease+"-meridian-hub" {
					typed(t, []*unstructured.Unstructured{o}, "Service", &svc)
				}
			}
			var ports []string
			for _, p := range svc.Spec.Ports {
				ports = append(ports, p.Name)
			}
			if !slices.Equal(ports, []string{"grpc", "http"}) {
				t.Errorf("API Service ports %v, want grpc and http", ports)
			}

			switch tc.replicas {
			case 1:
				var s appsv1.StatefulSet
				typed(t, objs, "StatefulSet", &s)
				if s.Spec.Replicas == nil || *s.Spec.Replicas != 1 || len(s.Spec.VolumeClaimTemplates) != 1 || s.Spec.VolumeClaimTemplates[0].Name != "data" {
					t.Errorf("StatefulSet replicas %v claims %v, want 1 replica with a data claim", s.Spec.Replicas, s.Spec.VolumeClaimTemplates)
				}
				if _, ok := vols["data"]; ok {
					t.Error("the StatefulSet's data is a pod volume, not its claim")
				}
			default:
				var d appsv1.Deployment
				typed(t, objs, "Deployment", &d)
				if d.Spec.Replicas == nil || *d.Spec.Replicas != tc.replicas {
					t.Errorf("Deployment replicas %v, want %d", d.Spec.Replicas, tc.replicas)
				}
				var pdb policyv1.PodDisruptionBudget
				typed(t, objs, "PodDisruptionBudget", &pdb)
				if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
					t.Errorf("PodDisruptionBudget maxUnavailable %v, want 1", pdb.Spec.MaxUnavailable)
				}
				for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
					if p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
						t.Errorf("probe scheme %s with API TLS, want HTTPS", p.HTTPGet.Scheme)
					}
				}
			}
		})
	}
}

// TestHubRenderedConfigLoads feeds the rendered ConfigMap, args and env to
// the hub's own configuration loader (the one meridian-hub runs at start):
// it must load without an error, and every file the configuration names
// must be one the pod mounts.
func TestHubRenderedConfigLoads(t *testing.T) {
	h := needHubHelm(t)
	for name, tc := range map[string]struct {
		values        map[string]any
		etcd          []string
		natsURL       string
		issuers       int
		files         []string
		tlsOn, tokens bool
	}{
		"single replica": {values: hubMinimal(nil), tokens: true},
		"several replicas": {values: hubHA(nil), etcd: []string{"http://etcd-0.etcd:2379", "http://etcd-1.etcd:2379"},
			natsURL: "tls://nats.nats:4222", issuers: 1, tlsOn: true, tokens: true,
			files: []string{"/etc/meridian/nats-auth/nats.creds", "/etc/meridian/nats-tls/ca.crt", "/etc/meridian/nats-tls/tls.crt",
				"/etc/meridian/nats-tls/tls.key", "/etc/meridian/tls/tls.crt", "/etc/meridian/tls/tls.key", "/etc/meridian/tls/ca.crt",
				"/etc/meridian/oidc-0/ca.crt"}},
		"several replicas, etcd TLS and user": {values: hubHA(map[string]any{
			"etcd": map[string]any{"endpoints": []any{"https://etcd-0.etcd:2379", "https://etcd-1.etcd:2379"},
				"tls":  map[string]any{"existingSecret": "hub-etcd-tls"},
				"auth": map[string]any{"user": "meridian", "existingSecret": "hub-etcd-auth"}}}),
			etcd: []string{"https://etcd-0.etcd:2379", "https://etcd-1.etcd:2379"}, natsURL: "tls://nats.nats:4222", issuers: 1, tlsOn: true, tokens: true,
			files: []string{"/etc/meridian/etcd-tls/ca.crt", "/etc/meridian/etcd-tls/tls.crt", "/etc/meridian/etcd-tls/tls.key",
				"/etc/meridian/etcd-auth/password",
				"/etc/meridian/nats-auth/nats.creds", "/etc/meridian/nats-tls/ca.crt", "/etc/meridian/nats-tls/tls.crt",
				"/etc/meridian/nats-tls/tls.key", "/etc/meridian/tls/tls.crt", "/etc/meridian/tls/tls.key", "/etc/meridian/tls/ca.crt",
				"/etc/meridian/oidc-0/ca.crt"}},
		"token auth, no bootstrap token": {values: hubHA(map[string]any{
			"nats": map[string]any{"url": "nats://nats:4222", "auth": map[string]any{"existingSecret": "hub-nats", "type": "password", "user": "hub"}},
			"auth": map[string]any{"bootstrapAdminToken": false}}),
			etcd: []string{"http://etcd-0.etcd:2379", "http://etcd-1.etcd:2379"}, natsURL: "nats://nats:4222", tlsOn: true,
			files: []string{"/etc/meridian/nats-auth/password", "/etc/meridian/tls/tls.crt", "/etc/meridian/tls/tls.key", "/etc/meridian/tls/ca.crt"}},
	} {
		t.Run(name, func(t *testing.T) {
			objs := renderHub(t, h, tc.values)
			var cm corev1.ConfigMap
			typed(t, objs, "ConfigMap", &cm)
			pod := hubPod(t, objs)
			c := pod.Containers[0]

			env := map[string]string{}
			for _, e := range c.Env {
				v := e.Value
				if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name" {
					v = hubRelease + "-meridian-hub-0"
				}
				env[e.Name] = v
			}
			mounts := map[string]string{}
			for _, m := range c.VolumeMounts {
				mounts[m.MountPath] = m.Name
			}
			l := cc.NewLoader(hubconfig.NewSchema(hubconfig.Options{ValidatePermission: func(p string) error {
				_, err := authz.ParsePermission(p)
				return err
			}}))
			l.Getenv = func(k string) string { return env[k] }
			l.ReadFile = func(p string) ([]byte, error) {
				name, ok := mounts[path.Dir(p)]
				if !ok || name != "config" {
					return nil, errors.New("not the mounted ConfigMap: " + p)
				}
				data, ok := cm.Data[path.Base(p)]
				if !ok {
					return nil, os.ErrNotExist
				}
				return []byte(data), nil
			}
			fs := pflag.NewFlagSet("meridian-hub", pflag.ContinueOnError)
			l.AddFlags(fs)
			if err := fs.Parse(c.Args); err != nil {
				t.Fatalf("the hub's flags refuse the rendered args %v: %v", c.Args, err)
			}
			conf, err := l.Load()
			if err != nil {
				t.Fatalf("the hub refuses the rendered configuration: %v\n%s", err, cm.Data["hub.yaml"])
			}
			if !slices.Equal(conf.Etcd.Endpoints, tc.etcd) || conf.NATS.URL != tc.natsURL {
				t.Errorf("etcd %v NATS %q, want %v %q", conf.Etcd.Endpoints, conf.NATS.URL, tc.etcd, tc.natsURL)
			}
			if conf.HubID != hubRelease+"-meridian-hub-0" {
				t.Errorf("hub id %q, want the pod name", conf.HubID)
			}
			if conf.Auth.Mode != hubconfig.AuthOn || len(conf.Auth.OIDC.Issuers) != tc.issuers {
				t.Errorf("auth %q with %d issuers, want on with %d", conf.Auth.Mode, len(conf.Auth.OIDC.Issuers), tc.issuers)
			}
			if conf.API.TLS.Enabled() != tc.tlsOn || conf.API.AllowInsecureNonLoopback == tc.tlsOn {
				t.Errorf("API TLS %v, plaintext allowed %v; want TLS %v", conf.API.TLS.Enabled(), conf.API.AllowInsecureNonLoopback, tc.tlsOn)
			}
			if (conf.Auth.AdminTokenFile != "") != !strings.Contains(name, "no bootstrap") || (conf.Auth.AdminTokenFile != "" && !strings.HasPrefix(conf.Auth.AdminTokenFile, "/data/")) {
				t.Errorf("admin token file %q", conf.Auth.AdminTokenFile)
			}
			// Every file named is mounted (Secret volumes map key to path).
			named := []string{conf.Etcd.TLS.CAFile, conf.Etcd.TLS.CertFile, conf.Etcd.TLS.KeyFile, conf.Etcd.PasswordFile, conf.NATS.CredsFile, conf.NATS.NKeyFile, conf.NATS.PasswordFile, conf.NATS.TokenFile,
				conf.NATS.TLS.CAFile, conf.NATS.TLS.CertFile, conf.NATS.TLS.KeyFile,
				conf.API.TLS.CertFile, conf.API.TLS.KeyFile, conf.API.TLS.ClientCAFile}
			for _, is := range conf.Auth.OIDC.Issuers {
				named = append(named, is.CAFile)
			}
			vols := map[string]corev1.Volume{}
			for _, v := range pod.Volumes {
				vols[v.Name] = v
			}
			var got []string
			for _, f := range named {
				if f == "" {
					continue
				}
				got = append(got, f)
				v, ok := vols[mounts[path.Dir(f)]]
				if !ok || v.Secret == nil || !slices.ContainsFunc(v.Secret.Items, func(k corev1.KeyToPath) bool { return k.Path == path.Base(f) }) {
					t.Errorf("%s is not mounted from a Secret", f)
				}
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tc.files))
			if !slices.Equal(got, want) {
				t.Errorf("files named %v, want %v", got, want)
			}
		})
	}
}

func TestHubBadValuesAreRefusedNamingTheField(t *testing.T) {
	h := needHubHelm(t)
	for name, tc := range map[string]struct {
		values map[string]any
		field  string
	}{
		"defaults: plaintext not chosen":        {map[string]any{}, "api.tls.existingSecret"},
		"several replicas with embedded stores": {hubMinimal(map[string]any{"replicaCount": 2}), "replicaCount"},
		"several replicas with embedded NATS":   {hubMinimal(map[string]any{"replicaCount": 2, "etcd": map[string]any{"endpoints": []any{"http://etcd:2379"}}}), "replicaCount"},
		"zero replicas":                         {hubMinimal(map[string]any{"replicaCount": 0}), "replicaCount"},
		"etcd endpoint without scheme":          {hubMinimal(map[string]any{"etcd": map[string]any{"endpoints": []any{"etcd:2379"}}}), "endpoints"},
		"NATS URL without scheme":               {hubMinimal(map[string]any{"nats": map[string]any{"url": "nats:4222"}}), "url"},
		"etcd TLS on the embedded etcd":         {hubMinimal(map[string]any{"etcd": map[string]any{"tls": map[string]any{"existingSecret": "x"}}}), "etcd.endpoints"},
		"etcd TLS with an http endpoint":        {hubHA(map[string]any{"etcd": map[string]any{"endpoints": []any{"http://etcd:2379"}, "tls": map[string]any{"existingSecret": "x"}}}), "https://"},
		"etcd user without a Secret":            {hubHA(map[string]any{"etcd": map[string]any{"endpoints": []any{"https://etcd:2379"}, "auth": map[string]any{"user": "meridian"}}}), "etcd.auth.existingSecret"},
		"etcd password Secret without a user":   {hubHA(map[string]any{"etcd": map[string]any{"endpoints": []any{"https://etcd:2379"}, "auth": map[string]any{"existingSecret": "x"}}}), "etcd.auth.user"},
		"NATS auth on the embedded NATS":        {hubMinimal(map[string]any{"nats": map[string]any{"auth": map[string]any{"existingSecret": "x"}}}), "nats.url"},
		"password without user":                 {hubHA(map[string]any{"nats": map[string]any{"url": "nats://n:4222", "auth": map[string]any{"existingSecret": "x", "type": "password"}}}), "nats.auth.user"},
		"unknown NATS auth type":                {hubHA(map[string]any{"nats": map[string]any{"url": "nats://n:4222", "auth": map[string]any{"existingSecret": "x", "type": "jwt"}}}), "type"},
		"client CA without a certificate":       {hubMinimal(map[string]any{"api": map[string]any{"insecurePlaintext": true, "tls": map[string]any{"clientCA": true}}}), "api.tls.clientCA"},
		"http OIDC issuer":                      {hubMinimal(map[string]any{"auth": map[string]any{"oidc": map[string]any{"issuers": []any{map[string]any{"issuerURL": "http://login", "audience": "m"}}}}}), "issuerURL"},
		"OIDC issuer without audience":          {hubMinimal(map[string]any{"auth": map[string]any{"oidc": map[string]any{"issuers": []any{map[string]any{"issuerURL": "https://login"}}}}}), "audience"},
		"ServiceMonitor without a token":        {hubMinimal(map[string]any{"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": true}}}), "metrics.serviceMonitor.tokenSecret.name"},
		"Ingress without a host":                {hubMinimal(map[string]any{"ingress": map[string]any{"enabled": true}}), "ingress.host"},
		"bad log level":                         {hubMinimal(map[string]any{"logging": map[string]any{"level": "verbose"}}), "level"},
		"bad duration":                          {hubMinimal(map[string]any{"scheduling": map[string]any{"leaderTTL": "5 seconds"}}), "leaderTTL"},
		"misspelt key":                          {hubMinimal(map[string]any{"etcd": map[string]any{"endpoint": []any{"http://etcd:2379"}}}), "endpoint"},
		"port out of range":                     {hubMinimal(map[string]any{"api": map[string]any{"insecurePlaintext": true, "grpcPort": 70000}}), "grpcPort"},
		"no resource requests":                  {hubMinimal(map[string]any{"resources": map[string]any{"requests": nil}}), "requests"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_, err := h.Template(ctx, hubRelease, releaseNS, tc.values)
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

// TestHubChartRulesAreTheDashboardsRules keeps the chart's copy of the
// Prometheus rules equal to dashboards/prometheus/meridian.rules.yaml, and
// checks the PrometheusRule carries every group.
func TestHubChartRulesAreTheDashboardsRules(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(root, "dashboards", "prometheus", "meridian.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := os.ReadFile(filepath.Join(root, "charts", "meridian-hub", "files", "meridian.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(src, cp) {
		t.Fatal("charts/meridian-hub/files/meridian.rules.yaml differs from dashboards/prometheus/meridian.rules.yaml: copy it again")
	}
	h := needHubHelm(t)
	objs := renderHub(t, h, hubMinimal(map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{"enabled": true}}}))
	for _, o := range objs {
		if o.GetKind() != "PrometheusRule" {
			continue
		}
		groups, _, _ := unstructured.NestedSlice(o.Object, "spec", "groups")
		if n := strings.Count(string(src), "\n  - name: "); len(groups) == 0 || len(groups) != n {
			t.Errorf("PrometheusRule has %d groups, the rules file %d", len(groups), n)
		}
		return
	}
	t.Fatal("no PrometheusRule rendered")
}

func TestHubNotesGiveTheFirstCommands(t *testing.T) {
	h := needHubHelm(t)
	h.Chart = copyChart(t, h.Chart)
	for name, tc := range map[string]struct {
		values       map[string]any
		want, absent []string
	}{
		"single replica": {values: hubMinimal(nil),
			want: []string{"one replica (StatefulSet hub-meridian-hub)", "embedded NATS (loopback only", "rollout status statefulset/hub-meridian-hub",
				"/readyz", "RBAC:       none", "debug -q -i hub-meridian-hub-0", "cat /proc/1/root/data/admin.token", "--token-file admin.token whoami", "plaintext"},
			absent: []string{"--ca <your CA>"}},
		"several replicas, TLS, OIDC, no bootstrap token": {values: hubHA(map[string]any{"auth": map[string]any{"bootstrapAdminToken": false,
			"oidc": map[string]any{"issuers": []any{map[string]any{"issuerURL": "https://login.example.com", "audience": "m"}}}}}),
			want:   []string{"3 replicas (Deployment hub-meridian-hub) with leader election", "NATS tls://nats.nats:4222", "rollout status deployment/hub-meridian-hub", "https://127.0.0.1:8080/readyz", "OIDC issuers: https://login.example.com"},
			absent: []string{"admin.token", "plaintext"}},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			out, err := h.run(ctx, tc.values, "template", hubRelease, h.Chart, "--namespace", releaseNS, "--show-only", "templates/notes.yaml")
			if err != nil {
				t.Fatalf("render NOTES.txt: %v", err)
			}
			objs, err := Objects(out)
			if err != nil || len(objs) != 1 {
				t.Fatalf("notes: %v (%d objects)", err, len(objs))
			}
			notes, _, _ := unstructured.NestedString(objs[0].Object, "data", "notes")
			for _, w := range tc.want {
				if !strings.Contains(notes, w) {
					t.Errorf("NOTES.txt lacks %q:\n%s", w, notes)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(notes, a) {
					t.Errorf("NOTES.txt has %q:\n%s", a, notes)
				}
			}
		})
	}
}
