package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"

	"github.com/meridian-gpu/meridian/connectors/kubernetes"
	"github.com/meridian-gpu/meridian/internal/e2e/k8shub"
	"github.com/meridian-gpu/meridian/internal/k8slocal"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// The real Kubernetes spoke of `make demo-k8s`: its cluster id and the
// namespace its Jobs go to.
const (
	KubernetesClusterID = "k8s-local"
	KubernetesNamespace = "meridian-demo"
)

// KubernetesUnavailable reports whether err from KubernetesSpoke means the
// control plane cannot run on this machine (not root, the binaries cannot
// be built): the demo is then skipped, not failed.
func KubernetesUnavailable(err error) bool {
	return errors.Is(err, k8slocal.ErrNotRoot) || errors.Is(err, k8slocal.ErrNotBuilt) || errors.Is(err, k8slocal.ErrBuildImpossible)
}

// KubernetesSpoke starts the local Kubernetes control plane
// (scripts/k8s-up.sh: kube-apiserver, controller-manager, scheduler and
// KWOK with three fake GPU nodes; the first run builds the binaries) and
// returns it as a real spoke that joins the three simulated clusters, and
// a function that closes its connector. Every workload of the mix becomes
// a container whose pods KWOK keeps Running for the workload's duration in
// real time. Jobs left by an earlier demo are deleted first; at the end the
// unfinished ones are, while finished Jobs stay for kubectl (their TTL is
// an hour). The connector's log goes to a temporary directory.
func KubernetesSpoke(ctx context.Context, stderr io.Writer) (*Spoke, func(), error) {
	fmt.Fprintf(stderr, "meridian demo: starting the local Kubernetes control plane (scripts/k8s-up.sh; the first run builds it, 15-20 min)\n")
	local, err := k8slocal.Up(ctx, true, stderr)
	if err != nil {
		return nil, nil, err
	}
	kube, err := clientset.NewForConfig(local.REST)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KubernetesNamespace}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, nil, fmt.Errorf("create namespace %s: %w", KubernetesNamespace, err)
	}
	// A new hub knows nothing of an earlier demo's dispatches: their Jobs
	// would only hold GPUs.
	if err := deleteDemoJobs(ctx, kube, false); err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "meridian-demo-k8s-")
	if err != nil {
		return nil, nil, fmt.Errorf("connector log directory: %w", err)
	}
	logPath := filepath.Join(dir, "connector.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes connector log: %w", err)
	}
	cfg := k8shub.ConnectorConfig(local, KubernetesClusterID, KubernetesNamespace)
	cfg.Labels = map[string]string{"scheduler": "kubernetes", "site": "local"}
	cfg.Logger = slog.New(slog.NewTextHandler(logFile, nil)).With("connector", "kubernetes")
	conn, err := kubernetes.New(ctx, cfg)
	if err != nil {
		logFile.Close()
		return nil, nil, fmt.Errorf("kubernetes connector: %w", err)
	}
	closeAll := func() {
		conn.Close()
		cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := deleteDemoJobs(cctx, kube, true); err != nil {
			fmt.Fprintf(stderr, "meridian demo: %v\n", err)
		}
		logFile.Close()
	}
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	inv, err := conn.Inventory(ictx)
	cancel()
	if err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("kubernetes inventory: %w", err)
	}
	gpus := map[string]int64{}
	nodes := 0
	var total int64
	for _, n := range inv.Nodes {
		if c := n.GetAcceleratorClass(); c != "" && len(n.GetGpus()) > 0 {
			gpus[c] += int64(len(n.GetGpus()))
			total += int64(len(n.GetGpus()))
			nodes++
		}
	}
	if len(gpus) == 0 {
		closeAll()
		return nil, nil, errors.New("kubernetes inventory: the local control plane advertises no GPU node")
	}
	kc := local.Kubeconfig
	return &Spoke{
		ID: KubernetesClusterID,
		What: fmt.Sprintf("REAL Kubernetes: kube-apiserver, scheduler and controller-manager on loopback, %d KWOK nodes with %d GPUs, Jobs in namespace %s",
			nodes, total, KubernetesNamespace),
		Connector: conn,
		GPUs:      gpus,
		Runtime: func(run time.Duration, exitCode int) *meridianv1.RuntimeTemplate {
			// KWOK runs no container: it completes the pod after the
			// delay, always with exit code 0, so exitCode only shows in
			// the command. The pods are pinned to the nodes the hub
			// planned: with only a preference the kube-scheduler may put
			// an any-class pod on the node the hub meant for the next
			// dispatch, whose pods then wait (and back off) until it ends.
			fields := k8shub.RunFor(max(run.Round(100*time.Millisecond), 100*time.Millisecond))
			fields[kubernetes.ExtraPinNodes] = true
			extra, _ := structpb.NewStruct(fields)
			return &meridianv1.RuntimeTemplate{
				Kind: &meridianv1.RuntimeTemplate_Container{Container: &meridianv1.ContainerTemplate{
					Image:   "busybox:1.37",
					Command: []string{"sh", "-c", fmt.Sprintf("sleep %.1f; exit %d", run.Seconds(), exitCode)},
				}},
				Extra: extra,
			}
		},
		Hints: func(hub string) []string {
			return []string{
				fmt.Sprintf("         go run ./cmd/meridianctl --hub %s list --cluster %s", hub, KubernetesClusterID),
				fmt.Sprintf("         go run ./cmd/meridianctl --hub %s submit -f examples/workloads/kubernetes.yaml   (A100 80GB: runs on %s)", hub, KubernetesClusterID),
				fmt.Sprintf("kubectl  kubectl --kubeconfig %s -n %s get jobs,pods -o wide", kc, KubernetesNamespace),
				fmt.Sprintf("         kubectl --kubeconfig %s -n %s get pods -L meridian.io/workload,meridian.io/dispatch", kc, KubernetesNamespace),
				fmt.Sprintf("         kubectl --kubeconfig %s get nodes -L nvidia.com/gpu.product,nvidia.com/gpu.count", kc),
				fmt.Sprintf("         (or source %s and use kubectl as usual)", filepath.Join(k8slocal.StateDir(), "env")),
				"keep up  go run ./cmd/meridian-demo --k8s --forever   (the hub and the Kubernetes spoke stay up after the summary)",
				"log      " + logPath + "   (the Kubernetes connector)",
			}
		},
	}, closeAll, nil
}

// deleteDemoJobs deletes the demo connector's Jobs in the demo namespace
// (and, through background propagation, their pods): all of them, or with
// onlyActive those that have not finished.
func deleteDemoJobs(ctx context.Context, kube clientset.Interface, onlyActive bool) error {
	sel := kubernetes.LabelManagedBy + "=" + kubernetes.ManagedByValue + "," + kubernetes.LabelCluster + "=" + KubernetesClusterID
	jobs, err := kube.BatchV1().Jobs(KubernetesNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return fmt.Errorf("list the demo's Jobs: %w", err)
	}
	bg := metav1.DeletePropagationBackground
	for _, j := range jobs.Items {
		if onlyActive && finished(&j) {
			continue
		}
		err := kube.BatchV1().Jobs(KubernetesNamespace).Delete(ctx, j.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete the demo's Job %s: %w", j.Name, err)
		}
	}
	return nil
}

func finished(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
