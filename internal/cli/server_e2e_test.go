package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/hub/server"
)

// startHub runs a whole hub replica in-process (embedded etcd and NATS,
// the scheduling loop, the gRPC API) and returns its gRPC address. It
// stops when the test ends.
func startHub(t *testing.T) string {
	t.Helper()
	s, err := server.New(server.Config{
		DataDir:        t.TempDir(),
		HubID:          "hub-cli-e2e",
		Version:        "v0-cli-e2e",
		UnsafeNoFsync:  true,
		LeaderTTL:      time.Second,
		SchedulePeriod: 100 * time.Millisecond,
	})
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
			return addr
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
	r = mustRun(t, addr, "", "list", "--queue", "acme/vision", "--phase", "queued")
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
	r = mustRun(t, addr, "", "version")
	if !strings.Contains(r.stdout, "Hub:    v0-cli-e2e (hub-cli-e2e at HUB, SERVING)") {
		t.Errorf("version =\n%s", r.stdout)
	}
}
