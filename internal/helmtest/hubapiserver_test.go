package helmtest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeclient "k8s.io/client-go/kubernetes"
)

// TestHubChartAppliesToTheAPIServer server-side applies the hub chart, in
// both topologies, to the local kube-apiserver: the apiserver validates
// every object (the StatefulSet or Deployment with dry-run=server: its pod
// needs an image this control plane cannot run). The ServiceMonitor and
// PrometheusRule stay off: their CRDs are not installed there.
func TestHubChartAppliesToTheAPIServer(t *testing.T) {
	h := needHubHelm(t)
	rc := needK8s(t)
	kube, err := kubeclient.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ap, err := newApplier(rc)
	if err != nil {
		t.Fatal(err)
	}
	for name, values := range map[string]map[string]any{
		"single replica": hubMinimal(nil),
		"several replicas with Ingress and egress rules": hubHA(map[string]any{
			"ingress":       map[string]any{"enabled": true, "host": "hub.example.com", "tlsSecret": "hub-ingress"},
			"networkPolicy": map[string]any{"enabled": true, "egress": []any{map[string]any{"ports": []any{map[string]any{"port": 2379}, map[string]any{"port": 4222}}}}},
		}),
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			ns := fmt.Sprintf("mrd-hubchart-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
			if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create namespace %s: %v", ns, err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				_ = kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
			})
			out, err := h.Template(ctx, hubRelease, ns, values)
			if err != nil {
				t.Fatalf("helm template: %v", err)
			}
			objs, err := Objects(out)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range objs {
				if o.GetNamespace() != ns {
					t.Errorf("%s %s rendered outside the release namespace (%q)", o.GetKind(), o.GetName(), o.GetNamespace())
				}
				workload := o.GetKind() == "StatefulSet" || o.GetKind() == "Deployment"
				if err := ap.apply(ctx, o, workload); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("%d objects applied: %v", len(objs), kinds(objs))
		})
	}
}
