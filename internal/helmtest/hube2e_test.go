package helmtest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"

	"github.com/meridian-gpu/meridian/connectors/simcluster"
	"github.com/meridian-gpu/meridian/internal/e2e/e2eutil"
	"github.com/meridian-gpu/meridian/internal/localrun"
	"github.com/meridian-gpu/meridian/internal/repo"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// TestHubChartConfigurationRunsAWorkload proves the chart's configuration
// is a working one: it takes the hub container's command args, env and
// ConfigMap from `helm template` (single-replica mode), runs the real
// meridian-hub binary with exactly those, runs an agent with a simulated
// cluster against it and passes a workload through.
//
// What a pod gives and a test process cannot is mapped, and only that:
// every mount path of the container becomes a directory under a temporary
// root (the ConfigMap's files written into its mount), the downward-API
// hub id becomes the StatefulSet's first pod name, and the listen ports
// (the pod's own network) are moved to free loopback ports through the
// hub's environment variables, which win over the file. The bootstrap
// admin token the chart asks for is the credential the test uses.
func TestHubChartConfigurationRunsAWorkload(t *testing.T) {
	h := needHubHelm(t)
	if testing.Short() {
		t.Skip("-short: not building and running meridian-hub")
	}
	objs := renderHub(t, h, hubMinimal(nil))
	var cm corev1.ConfigMap
	typed(t, objs, "ConfigMap", &cm)
	pod := hubPod(t, objs)
	c := pod.Containers[0]

	root := t.TempDir()
	var mounts []string
	for _, m := range c.VolumeMounts {
		mounts = append(mounts, m.MountPath)
		if err := os.MkdirAll(filepath.Join(root, m.MountPath), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// mapPaths moves every mount path (followed by / or a line's end) under
	// root, in one pass: root itself may lie under a mount path (/tmp).
	mapPaths := func(s string) string {
		for i, m := range mounts {
			s = strings.ReplaceAll(s, m+"/", fmt.Sprintf("\x00%d/", i))
			s = strings.ReplaceAll(s, m+"\n", fmt.Sprintf("\x00%d\n", i))
		}
		for i, m := range mounts {
			s = strings.ReplaceAll(s, fmt.Sprintf("\x00%d", i), filepath.Join(root, m))
		}
		return s
	}
	configDir := ""
	for _, m := range c.VolumeMounts {
		if m.Name == "config" {
			configDir = filepath.Join(root, m.MountPath)
		}
	}
	for k, v := range cm.Data {
		if err := os.WriteFile(filepath.Join(configDir, k), []byte(mapPaths(v)), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	bin := filepath.Join(t.TempDir(), "meridian-hub")
	repoRoot, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", bin, "./cmd/meridian-hub")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/meridian-hub: %v\n%s", err, out)
	}

	if len(c.Command) != 1 || c.Command[0] != "meridian-hub" {
		t.Fatalf("container command %v, want [meridian-hub]", c.Command)
	}
	var args []string
	for _, a := range c.Args {
		args = append(args, mapPaths(a))
	}
	env := []string{"HOME=" + root, "PATH=" + os.Getenv("PATH")}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env = append(env, e.Name+"="+hubRelease+"-meridian-hub-0")
		case e.ValueFrom != nil:
			t.Fatalf("env %s from %+v: the test does not map it", e.Name, e.ValueFrom)
		default:
			env = append(env, e.Name+"="+mapPaths(e.Value))
		}
	}
	addrFile := filepath.Join(root, "addr.json")
	env = append(env,
		"MERIDIAN_GRPC_ADDR=127.0.0.1:"+freePort(t), "MERIDIAN_HTTP_ADDR=127.0.0.1:"+freePort(t),
		"MERIDIAN_EMBEDDED_NATS_PORT=0", "MERIDIAN_ADDR_FILE="+addrFile)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	logs := new(e2eutil.LogBuffer)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, logs, logs
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 20 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	defer func() {
		cancel()
		<-exited
	}()
	fail := func(format string, a ...any) {
		t.Helper()
		t.Fatalf(format+"\n--- meridian-hub %s ---\n%s", append(a, strings.Join(args, " "), logs.Tail(4000))...)
	}

	var info struct {
		GRPC, HTTP, NATS string
		HubID            string `json:"hub_id"`
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if b, err := os.ReadFile(addrFile); err == nil && json.Unmarshal(b, &info) == nil {
			break
		}
		select {
		case <-exited:
			fail("meridian-hub exited before it listened: %v", waitErr)
		default:
		}
		if time.Now().After(deadline) {
			fail("meridian-hub did not listen within 60s")
		}
	}
	if info.HubID != hubRelease+"-meridian-hub-0" {
		fail("hub id %q, want the pod name", info.HubID)
	}
	// The readiness probe's endpoint, as the kubelet asks it.
	probe := c.ReadinessProbe.HTTPGet
	if err := localrun.WaitReady(ctx, fmt.Sprintf("%s://%s%s", strings.ToLower(string(probe.Scheme)), info.HTTP, probe.Path), 60*time.Second); err != nil {
		fail("readiness: %v", err)
	}
	tokenFile := filepath.Join(root, "data", "admin.token")
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		fail("the bootstrap admin token: %v", err)
	}
	conn, err := grpc.NewClient(info.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()), localrun.Bearer(strings.TrimSpace(string(tok))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	q, cl, wl := meridianv1.NewQueueServiceClient(conn), meridianv1.NewClusterServiceClient(conn), meridianv1.NewWorkloadServiceClient(conn)
	const class, queue, clusterID = "nvidia-a100-40gb", "helm", "sim-helm"
	if _, err := q.CreateQueue(ctx, &meridianv1.CreateQueueRequest{Queue: &meridianv1.Queue{Path: queue, Weight: 1,
		Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: class, NominalMilliGpus: 8000}}}}); err != nil {
		fail("create queue with the bootstrap token: %v", err)
	}

	scfg, err := simcluster.Example("a100-fractional")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sim, err := simcluster.New(scfg, simcluster.Options{DefaultDuration: time.Second, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	stop, err := localrun.Agent(ctx, ctx, info.NATS, "helm-agent", agent.Config{ClusterID: clusterID, Connector: sim, Logger: log, Version: "helmtest",
		HeartbeatInterval: 300 * time.Millisecond, AdvertiseInterval: time.Second, ChangeDelay: 20 * time.Millisecond})
	if err != nil {
		fail("agent: %v", err)
	}
	defer stop()
	if err := e2eutil.WaitClusters(ctx, cl, 60*time.Second, clusterID); err != nil {
		fail("cluster: %v", err)
	}
	resp, err := wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: &meridianv1.Workload{
		Name: "through-the-chart", Queue: queue, Labels: map[string]string{simcluster.LabelDuration: "1s"},
		PodSets: []*meridianv1.PodSet{{Name: "main", Replicas: 1, Resources: &meridianv1.Resources{GpuMilli: 1000, AcceleratorClass: class}}}}})
	if err != nil {
		fail("submit: %v", err)
	}
	id := resp.GetWorkload().GetId()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		w, err := wl.GetWorkload(ctx, &meridianv1.GetWorkloadRequest{Id: id})
		if err != nil {
			fail("get %s: %v", id, err)
		}
		p := w.GetStatus().GetPhase()
		if p == meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED {
			t.Logf("workload %s SUCCEEDED on %s through the hub run with the chart's configuration", id, clusterID)
			return
		}
		if e2eutil.TerminalPhase(p) || time.Now().After(deadline) {
			fail("workload %s is %s (%q)", id, p, w.GetStatus().GetMessage())
		}
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return p
}
