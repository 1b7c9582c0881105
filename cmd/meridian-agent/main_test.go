package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/connectors/simcluster"
	embednats "github.com/meridian-gpu/meridian/internal/embedded/nats"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

func TestFlagErrors(t *testing.T) {
	good := []string{"--cluster-id", "c1", "--nats-url", "nats://127.0.0.1:1", "--sim-config", "x.yaml"}
	with := func(extra ...string) []string { return append(append([]string{}, good...), extra...) }
	tests := map[string]struct {
		args []string
		want string
	}{
		"no cluster id":         {[]string{"--nats-url", "nats://x", "--sim-config", "x"}, "clusterID (--cluster-id): required"},
		"bad cluster id":        {[]string{"--cluster-id", "a.b", "--nats-url", "nats://x", "--sim-config", "x"}, "--cluster-id"},
		"no nats url":           {[]string{"--cluster-id", "c", "--nats-url", "", "--sim-config", "x"}, "nats.url (--nats-url): required"},
		"slurm with sim config": {with("--connector", "slurm"), "simcluster.config (--sim-config): only applies to connector simcluster"},
		"slurm nothing to talk to": {[]string{"--cluster-id", "c", "--nats-url", "nats://x", "--connector", "slurm", "--slurm-cli", "off"},
			"slurm.restURL (--slurm-rest-url): connector slurm needs slurm.restURL (--slurm-rest-url) or the Slurm commands"},
		"slurm bad cli mode": {[]string{"--cluster-id", "c", "--nats-url", "nats://x", "--connector", "slurm", "--slurm-cli", "maybe"}, "--slurm-cli"},
		"slurm rest without credentials": {[]string{"--cluster-id", "c", "--nats-url", "nats://x", "--connector", "slurm",
			"--slurm-rest-url", "http://127.0.0.1:6820"}, "--slurm-jwt-key-file"},
		"slurm bad gpu memory": {[]string{"--cluster-id", "c", "--nats-url", "nats://x", "--connector", "slurm",
			"--slurm-gpu-memory", "h100=lots"}, "--slurm-gpu-memory"},
		"slurm bad class flag": {[]string{"--cluster-id", "c", "--nats-url", "nats://x", "--connector", "slurm",
			"--slurm-class", "h100"}, "key=value"},
		"kubernetes with sim config": {with("--connector", "kubernetes"), "simcluster.config (--sim-config): only applies to connector simcluster"},
		"kubernetes bad mode": {[]string{"--cluster-id", "c", "--nats-url", "nats://x", "--connector", "kubernetes",
			"--k8s-fractional-modes", "hami,mps"}, `kubernetes.fractionalModes[1] (--k8s-fractional-modes): "mps"`},
		"kubernetes bad gang": {[]string{"--cluster-id", "c", "--nats-url", "nats://x", "--connector", "kubernetes",
			"--k8s-gang", "volcano"}, "gang"},
		"kubernetes kueue without queue": {[]string{"--cluster-id", "c", "--nats-url", "nats://x", "--connector", "kubernetes",
			"--k8s-gang", "kueue"}, "kubernetes.kueueQueue (--k8s-kueue-queue): required with gang kueue"},
		"kubernetes bad shared replicas": {[]string{"--cluster-id", "c", "--nats-url", "nats://x", "--connector", "kubernetes",
			"--k8s-shared-replicas", "-1"}, "kubernetes.sharedReplicas (--k8s-shared-replicas)"},
		"unknown connector":  {with("--connector", "mesos"), "want simcluster, slurm or kubernetes"},
		"no sim config":      {[]string{"--cluster-id", "c", "--nats-url", "nats://x"}, "give exactly one of simcluster.config (--sim-config) or simcluster.example (--sim-example)"},
		"both sim sources":   {with("--sim-example", "h100-nvlink"), "exactly one of"},
		"zero time scale":    {with("--time-scale", "0"), "--time-scale"},
		"negative heartbeat": {with("--heartbeat-interval", "-1s"), "--heartbeat-interval"},
		"zero parallelism":   {with("--launch-parallelism", "0"), "--launch-parallelism"},
		"huge parallelism":   {with("--launch-parallelism", "100000"), "--launch-parallelism"},
		"zero advertise":     {with("--advertise-interval", "0s"), "--advertise-interval"},
		"bad metrics addr":   {with("--metrics-addr", "nope"), "--metrics-addr"},
		"bad log level":      {with("--log-level", "loud"), "--log-level"},
		"bad log format":     {with("--log-format", "xml"), "--log-format"},
		"stray argument":     {with("extra"), "unexpected argument"},
		"unknown flag":       {with("--frobnicate"), "frobnicate"},
		"bad duration":       {with("--heartbeat-interval", "soon"), "heartbeat-interval"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := parseFlags(tc.args, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
	o, err := parseFlags(good, io.Discard)
	if err != nil {
		t.Fatalf("good flags refused: %v", err)
	}
	if c := o.conf; c.Connector != "simcluster" || c.Simcluster.TimeScale != 1 || c.HeartbeatInterval.D() != 2*time.Second {
		t.Errorf("defaults not applied: %+v", c)
	}
}

func TestSlurmFlagsBuildConfig(t *testing.T) {
	t.Setenv("MERIDIAN_SLURM_TOKEN", "")
	o, err := parseFlags([]string{"--cluster-id", "gpu-west", "--nats-url", "nats://x", "--connector", "slurm",
		"--slurm-rest-url", "http://127.0.0.1:6820", "--slurm-jwt-key-file", "/nonexistent/jwt.key",
		"--slurm-class", "h100=nvidia-h100-80gb", "--slurm-gpu-memory", "h100=81920", "--label", "site=west", "--label", "tier=gold"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s := o.conf.Slurm; s.Classes["h100"] != "nvidia-h100-80gb" || s.GPUMemoryMiB["h100"] != 81920 || len(o.conf.Labels) != 2 || o.conf.Labels["tier"] != "gold" {
		t.Fatalf("repeatable flags not collected: classes %v memory %v labels %v", s.Classes, s.GPUMemoryMiB, o.conf.Labels)
	}
	// The key file does not exist: the connector says so, naming it.
	_, _, err = buildConnector(o, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "jwt_key_file") {
		t.Fatalf("buildConnector = %v, want an error about the jwt key file", err)
	}
}

func TestRunReportsUnknownExample(t *testing.T) {
	err := run(context.Background(), []string{"--cluster-id", "c", "--nats-url", "nats://127.0.0.1:1", "--sim-example", "nope"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--sim-example") || !strings.Contains(err.Error(), "h100-nvlink") {
		t.Fatalf("err %v, want one naming --sim-example and listing the examples", err)
	}
}

func TestRunReportsBadSimConfig(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("nodes:\n  - name: a\n    gpus: -2\n    cpuMilli: 1\n    memoryMiB: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), []string{"--cluster-id", "c", "--nats-url", "nats://127.0.0.1:1", "--sim-config", bad}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "nodes[0].gpus") {
		t.Fatalf("err %v, want one naming nodes[0].gpus", err)
	}
}

// TestRunServesMetrics starts the real binary's run loop against embedded
// NATS with an example cluster and scrapes /metrics.
func TestRunServesMetrics(t *testing.T) {
	ns, err := embednats.Start(embednats.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	addr := freeAddr(t)
	go func() {
		done <- run(ctx, []string{"--cluster-id", "demo-a", "--nats-url", ns.ClientURL(),
			"--sim-example", "a100-fractional", "--time-scale", "60",
			"--heartbeat-interval", "50ms", "--metrics-addr", addr, "--log-level", "error"}, io.Discard)
	}()
	var body string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			if strings.Contains(body, "meridian_agent_heartbeats_total") && !strings.Contains(body, "meridian_agent_heartbeats_total 0") {
				break
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(body, "meridian_agent_heartbeats_total") || strings.Contains(body, "meridian_agent_heartbeats_total 0") {
		t.Fatalf("no heartbeats counted in /metrics:\n%s", body)
	}
	if !strings.Contains(body, `meridian_agent_advertisements_total{kind="full"}`) {
		t.Errorf("no full advertisement counted:\n%s", body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not stop")
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestRunReportsBadKubeconfig(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-kubeconfig")
	err := run(context.Background(), []string{"--cluster-id", "c", "--nats-url", "nats://127.0.0.1:1",
		"--connector", "kubernetes", "--kubeconfig", missing}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--connector kubernetes") || !strings.Contains(err.Error(), missing) {
		t.Fatalf("err %v, want one naming the connector and the kubeconfig path", err)
	}
}

// MERIDIAN_SIM_LAUNCH_JOURNAL makes the simulated cluster append its launch
// journal to the file named.
func TestSimLaunchJournalFromEnvironment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	t.Setenv(EnvSimLaunchJournal, path)
	o, err := parseFlags([]string{"--cluster-id", "c", "--nats-url", "nats://x", "--sim-example", "h100-nvlink"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	conn, closer, err := buildConnector(o, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	d := &agentv1.Dispatch{DispatchId: "d1", WorkloadId: "w1", Workload: &meridianv1.Workload{Id: "w1",
		PodSets: []*meridianv1.PodSet{{Name: "m", Replicas: 2, Resources: &meridianv1.Resources{GpuMilli: 1000, AcceleratorClass: "nvidia-h100-80gb"}}}}}
	if err := conn.Launch(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	closer()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	es, err := simcluster.ReadJournal(f)
	if err != nil || len(es) != 1 || es[0].Event != simcluster.JournalLaunch || es[0].DispatchID != "d1" || es[0].Replicas != 2 {
		t.Fatalf("journal = %+v, %v; want one launch of d1 with 2 replicas", es, err)
	}
}
