package vaultsecrets_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/vault/api"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meridian-gpu/meridian/internal/k8slocal"
	"github.com/meridian-gpu/meridian/internal/vaultlocal"
	"github.com/meridian-gpu/meridian/internal/vaultsecrets"
)

// TestVaultKubernetesAuth: an agent in a pod logs in with its service
// account token through Vault's Kubernetes auth method, which checks the
// token with a TokenReview against a real kube-apiserver (the loopback
// control plane of scripts/k8s-up.sh; skipped without it unless
// MERIDIAN_REQUIRE_K8S=1). A token of another service account is refused.
func TestVaultKubernetesAuth(t *testing.T) {
	srv := vaultlocal.Start(t)
	if os.Geteuid() != 0 {
		skipOrFailK8s(t, "not root: the local control plane (scripts/k8s-up.sh) needs root")
	}
	local, err := k8slocal.Up(context.Background(), false, nil)
	if errors.Is(err, k8slocal.ErrNotBuilt) {
		skipOrFailK8s(t, err.Error())
	}
	if err != nil {
		t.Fatalf("local Kubernetes: %v", err)
	}
	ctx := ctxFor(t, 2*time.Minute)
	cs, err := kubernetes.NewForConfig(local.REST)
	must(t, err)

	// A namespace with the agent's service account and a stranger; the
	// agent's may ask for TokenReviews with its own token (Vault then uses
	// the login token as the reviewer's).
	ns := fmt.Sprintf("meridian-vault-test-%d", time.Now().UnixNano()%1_000_000_000)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, sa := range []string{"meridian-agent", "stranger"} {
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ns + "-auth-delegator"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:auth-delegator"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "meridian-agent", Namespace: ns}, {Kind: "ServiceAccount", Name: "stranger", Namespace: ns}}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bg := context.Background()
		_ = cs.RbacV1().ClusterRoleBindings().Delete(bg, crb.Name, metav1.DeleteOptions{})
		_ = cs.CoreV1().Namespaces().Delete(bg, ns, metav1.DeleteOptions{})
	})
	token := func(sa string) string {
		exp := int64(600)
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
		must(t, err)
		return tr.Status.Token
	}

	root := rootClient(t, srv)
	must(t, root.Sys().PutPolicyWithContext(ctx, "meridian-agent", agentPolicy))
	must(t, root.Sys().EnableAuthWithOptionsWithContext(ctx, "kubernetes", &api.EnableAuthOptions{Type: "kubernetes"}))
	// Vault checks the apiserver's certificate; the admin kubeconfig of
	// scripts/k8s-up.sh may skip that check, so take the self-signed
	// serving certificate the script writes.
	caPEM := string(local.REST.TLSClientConfig.CAData)
	if caPEM == "" {
		f := local.REST.TLSClientConfig.CAFile
		if f == "" {
			f = filepath.Join(k8slocal.StateDir(), "certs", "apiserver.crt")
		}
		b, err := os.ReadFile(f)
		must(t, err)
		caPEM = string(b)
	}
	_, err = root.Logical().WriteWithContext(ctx, "auth/kubernetes/config", map[string]any{
		"kubernetes_host": local.REST.Host, "kubernetes_ca_cert": caPEM, "disable_local_ca_jwt": true})
	must(t, err)
	_, err = root.Logical().WriteWithContext(ctx, "auth/kubernetes/role/meridian-agent", map[string]any{
		"bound_service_account_names": "meridian-agent", "bound_service_account_namespaces": ns,
		"token_policies": "meridian-agent", "token_ttl": "1h"})
	must(t, err)
	_, err = root.KVv2("secret").Put(ctx, "meridian/clusters/east/nats", map[string]any{"creds": "x"})
	must(t, err)

	cfg := vaultsecrets.Config{Addr: srv.Addr, Auth: vaultsecrets.AuthKubernetes, Role: "meridian-agent",
		K8sTokenFile: writeFile(t, "token", token("meridian-agent"))}
	m, err := vaultsecrets.New(ctx, cfg, vaultsecrets.WithLogger(testLogger()))
	must(t, err)
	must(t, m.NewKVSecret("nats-creds", "secret", "meridian/clusters/east/nats", 0).Fetch(ctx))

	cfg.K8sTokenFile = writeFile(t, "stranger", token("stranger"))
	_, err = vaultsecrets.New(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), `--vault-role "meridian-agent"`) {
		t.Fatalf("another service account's token: want a refusal naming --vault-role, got %v", err)
	}
}

func skipOrFailK8s(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("MERIDIAN_REQUIRE_K8S") == "1" {
		t.Fatalf("MERIDIAN_REQUIRE_K8S=1 and %s", msg)
	}
	t.Skipf("SKIPPING the Kubernetes auth test: %s (set MERIDIAN_REQUIRE_K8S=1 to make this a failure)", msg)
}
