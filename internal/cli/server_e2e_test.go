package cli

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/connectors/simcluster"
	"github.com/meridian-gpu/meridian/hub/server"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// startHub runs a whole hub replica in-process (embedded etcd and NATS,
// the scheduling loop, the gRPC API) and returns its gRPC address. It
// stops when the test ends.
func startHub(t *testing.T) string {
	t.Helper()
	addr, _ := startHubNATS(t)
	return addr
}

// startHubNATS is startHub that also returns the hub's NATS URL, for
// agents.
func startHubNATS(t *testing.T, mutate ...func(*server.Config)) (string, string) {
	t.Helper()
	cfg := server.Config{
		DataDir:        t.TempDir(),
		HubID:          "hub-cli-e2e",
		Version:        "v0-cli-e2e",
		UnsafeNoFsync:  true,
		LeaderTTL:      time.Second,
		SchedulePeriod: 100 * time.Millisecond,
	}
	for _, m := range mutate {
		m(&cfg)
	}
	s, err := server.New(cfg)
	if err != nil {
		t.Fatalf("start hub: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var runErr error
	stopped := false
	t.Cleanup(func() {
		cancel()
		if !stopped {
			select {
			case runErr = <-done:
			case <-time.After(15 * time.Second):
				t.Error("hub did not stop within 15s")
			}
		}
		if runErr != nil {
			t.Errorf("hub Run: %v", runErr)
		}
		if err := s.Close(); err != nil {
			t.Errorf("hub Close: %v", err)
		}
	})
	addr := s.Addrs().GRPC
	// Wait until the hub answers and has elected itself leader.
	deadline := time.Now().Add(15 * time.Second)
	for {
		r := runCLI(t, addr, "", "version")
		if r.code == ExitOK && strings.Contains(r.stdout, "SERVING") {
			return addr, s.NATSURL()
		}
		if time.Now().After(deadline) {
			t.Fatalf("hub not serving after 15s: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		select {
		case runErr = <-done:
			stopped = true
			t.Fatalf("hub stopped before serving: %v", runErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// getJSON runs `get ID -o json` and decodes the fields the test needs.
func getJSON(t *testing.T, addr, id string) (phase, reason string) {
	t.Helper()
	r := mustRun(t, addr, "", "get", id, "-o", "json")
	var w struct {
		Status struct {
			Phase         string `json:"phase"`
			PendingReason string `json:"pending_reason"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &w); err != nil {
		t.Fatalf("get -o json: %v\n%s", err, r.stdout)
	}
	return w.Status.Phase, w.Status.PendingReason
}

// TestEndToEndWithHub runs submit, get, list, explain and cancel through
// the CLI against a real hub: embedded etcd and NATS, leader election and
// the scheduling loop. No agent is connected, so the workload stays
// queued, and the loop must say why.
func TestEndToEndWithHub(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole hub; skipped with -short")
	}
	addr := startHub(t)

	mustRun(t, addr, "", "queue", "apply", "-f", "../../examples/queues/acme.yaml")
	r := mustRun(t, addr, "", "submit", "-f", "../../examples/workloads/gang.yaml", "--idempotency-key", "cli-e2e")
	fields := strings.Fields(r.stdout)
	if len(fields) < 2 || !strings.HasPrefix(fields[1], "wl-") {
		t.Fatalf("submit printed %q", r.stdout)
	}
	id := fields[1]

	// The scheduling loop replaces the API's placeholder reason with its
	// own once it has looked at the workload.
	deadline := time.Now().Add(15 * time.Second)
	var phase, reason string
	for {
		phase, reason = getJSON(t, addr, id)
		if reason != "" && reason != "waiting for the scheduler" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 15s the workload is %s with reason %q; the loop never explained it", phase, reason)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if phase != "WORKLOAD_PHASE_QUEUED" {
		t.Fatalf("with no cluster the workload is %s, want QUEUED", phase)
	}

	r = mustRun(t, addr, "", "get", id)
	if !strings.Contains(squash(r.stdout), "Pending reason: "+squash(reason)) {
		t.Errorf("get does not show the pending reason %q:\n%s", reason, r.stdout)
	}
	r = mustRun(t, addr, "", "list", "--queue", "acme/research", "--phase", "queued")
	if !strings.Contains(r.stdout, id) {
		t.Errorf("list lacks %s:\n%s", id, r.stdout)
	}
	r = mustRun(t, addr, "", "explain", id)
	if !strings.Contains(squash(r.stdout), "Phase: QUEUED") || !strings.Contains(r.stdout, "Clusters (best first):") {
		t.Errorf("explain =\n%s", r.stdout)
	}
	r = runCLI(t, addr, "", "clusters")
	if r.code != ExitOK {
		t.Errorf("clusters: exit %d %s", r.code, r.stderr)
	}

	r = mustRun(t, addr, "", "cancel", id)
	if r.stdout != "workload "+id+" cancelled\n" {
		t.Errorf("cancel printed %q", r.stdout)
	}
	if phase, _ := getJSON(t, addr, id); phase != "WORKLOAD_PHASE_CANCELLED" {
		t.Errorf("after cancel the workload is %s", phase)
	}
	r = mustRun(t, addr, "", "list", "--phase", "queued")
	if r.stdout != "" {
		t.Errorf("nothing should be queued after the cancel:\n%s", r.stdout)
	}

	// An array: five copies in one call, found by their index label;
	// repeating the command submits nothing twice.
	r = mustRun(t, addr, "", "submit", "-f", "../../examples/workloads/gang.yaml", "--count", "5", "--idempotency-key", "cli-array")
	if !strings.HasPrefix(r.stdout, "5 workloads submitted to queue acme/research (wl-") {
		t.Errorf("array submit printed %q", r.stdout)
	}
	r = mustRun(t, addr, "", "list", "-l", "array-index=3")
	if rows := strings.Count(strings.TrimSpace(r.stdout), "\n"); rows != 1 || !strings.Contains(r.stdout, "-3") {
		t.Errorf("list -l array-index=3 =\n%s", r.stdout)
	}
	r = mustRun(t, addr, "", "submit", "-f", "../../examples/workloads/gang.yaml", "--count", "5", "--idempotency-key", "cli-array")
	if !strings.HasPrefix(r.stdout, "0 workloads submitted") || !strings.Contains(r.stdout, "5 already submitted") {
		t.Errorf("repeated array submit printed %q", r.stdout)
	}
	// The table needs only ids (the hub answers in the basic view); -o
	// json prints the whole stored workloads.
	r = mustRun(t, addr, "", "submit", "-f", "../../examples/workloads/gang.yaml", "--count", "2", "--idempotency-key", "cli-array-json", "-o", "json")
	if !strings.Contains(r.stdout, `"pod_sets"`) || !strings.Contains(r.stdout, `"id"`) {
		t.Errorf("array submit -o json printed no whole workloads:\n%s", r.stdout)
	}
	r = runCLI(t, addr, "", "submit", "-f", "../../examples/workloads/gang.yaml", "--count", "0")
	if r.code != ExitUsage || !strings.Contains(r.stderr, "--count") {
		t.Errorf("--count 0: exit %d, %q", r.code, r.stderr)
	}

	r = mustRun(t, addr, "", "version")
	if !strings.Contains(r.stdout, "Hub:    v0-cli-e2e (hub-cli-e2e at HUB, SERVING)") {
		t.Errorf("version =\n%s", r.stdout)
	}
}

// startAgent connects a simulated cluster (the built-in example `example`)
// to the hub's NATS through a real spoke agent. Work runs for duration
// unless its labels say otherwise.
func startAgent(t *testing.T, natsURL, clusterID, example string, duration time.Duration) {
	t.Helper()
	startAgentWith(t, natsURL, clusterID, example, duration)
}

// startAgentWith is startAgent with extra NATS options (a credential) and
// returns the agent's bus.
func startAgentWith(t *testing.T, natsURL, clusterID, example string, duration time.Duration, busOpts ...natsbus.Option) *natsbus.Bus {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg, err := simcluster.Example(example)
	if err != nil {
		t.Fatal(err)
	}
	sim, err := simcluster.New(cfg, simcluster.Options{DefaultDuration: duration})
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	bus, err := natsbus.Connect(cctx, natsURL, busOpts...)
	ccancel()
	if err != nil {
		t.Fatalf("connect the agent to NATS: %v", err)
	}
	a, err := agent.New(agent.Config{
		ClusterID: clusterID, Bus: bus, Connector: sim,
		HeartbeatInterval: 200 * time.Millisecond, AdvertiseInterval: time.Second, ChangeDelay: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("agent did not stop within 15s")
		}
		sim.Close()
		bus.Close()
	})
	return bus
}

// waitPhase polls `get` until the workload reaches phase.
func waitPhase(t *testing.T, addr, id, phase string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, reason := getJSON(t, addr, id)
		if got == phase {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s workload %s is %s (reason %q), want %s", id, got, reason, phase)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEndToEndRunsOnAgent: a workload submitted through the CLI runs on a
// simulated cluster behind a real spoke agent and succeeds, its quota is
// released, and a running workload cancelled through the CLI is stopped by
// the agent.
func TestEndToEndRunsOnAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole hub and an agent; skipped with -short")
	}
	addr, natsURL := startHubNATS(t)
	startAgent(t, natsURL, "ams-a100", "a100-fractional", 300*time.Millisecond)

	// The cluster shows up, ready, with its classes and fractional modes.
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := mustRun(t, addr, "", "clusters")
		if strings.Contains(squash(r.stdout), "ams-a100 READY simcluster nvidia-a100-40gb 6 24 24 24 mps,time-slice,memory 0 ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not listed as ready after 20s:\n%s%s", r.stdout, r.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}

	mustRun(t, addr, "", "queue", "apply", "-f", "../../examples/queues/acme.yaml")
	job := "name: short\nqueue: acme/research\npod_sets:\n- name: worker\n  replicas: 2\n  resources:\n    gpu_milli: 1000\n    accelerator_class: nvidia-a100-40gb\n"
	r := mustRun(t, addr, job, "submit", "-f", "-")
	short := strings.Fields(r.stdout)[1]
	waitPhase(t, addr, short, "WORKLOAD_PHASE_SUCCEEDED")
	r = mustRun(t, addr, "", "list", "--cluster", "ams-a100")
	if !strings.Contains(squash(r.stdout), short+" short acme/research SUCCEEDED ams-a100 2 ") {
		t.Errorf("list --cluster =\n%s", r.stdout)
	}

	// Quota released: nothing of acme/research is in use any more.
	deadline = time.Now().Add(10 * time.Second)
	for {
		r = mustRun(t, addr, "", "queues", "--prefix", "acme/research")
		// QUEUE WEIGHT FAIRSHARE PENDING RUNNING CLASS NOMINAL BORROW LEND USED ...
		if regexp.MustCompile(`\nacme/research 3 [0-9.]+ 0 0 \* 0 unlimited all 0 0 0\n`).MatchString(squash(r.stdout)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("quota of acme/research not released after 10s:\n%s", r.stdout)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A long job, cancelled while it runs: the agent stops it.
	long := strings.Replace(job, "name: short\n", "name: long\nlabels:\n  meridian.io/sim-duration: 1h\n", 1)
	r = mustRun(t, addr, long, "submit", "-f", "-")
	id := strings.Fields(r.stdout)[1]
	waitPhase(t, addr, id, "WORKLOAD_PHASE_RUNNING")
	r = mustRun(t, addr, "", "cancel", id)
	// The agent may stop it before the API's wait for the loop ends, so
	// the answer is either the request in flight or the end itself.
	requested := "workload " + id + ": cancel requested; cluster ams-a100 will stop it (phase RUNNING)\n"
	if done := "workload " + id + " cancelled\n"; r.stdout != requested && r.stdout != done {
		t.Errorf("cancel printed %q, want %q or %q", r.stdout, requested, done)
	}
	waitPhase(t, addr, id, "WORKLOAD_PHASE_CANCELLED")
	r = mustRun(t, addr, "", "get", id)
	if !strings.Contains(squash(r.stdout), "CancelRequested True") {
		t.Errorf("get does not show the CancelRequested condition:\n%s", r.stdout)
	}
}
