package cli

import (
	"context"
	"encoding/json"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/meridian-gpu/meridian/hub/api"
	"github.com/meridian-gpu/meridian/hub/store"
	"github.com/meridian-gpu/meridian/internal/cancelfold"
	embedetcd "github.com/meridian-gpu/meridian/internal/embedded/etcd"
)

// startRealAPI serves the real hub API (hub/api over an embedded etcd on
// loopback) and returns its gRPC address. There is no scheduling loop, so
// workloads stay QUEUED until cancelled (cancelfold does the loop's part).
func startRealAPI(t *testing.T) string { return startRealAPIWith(t, true) }

// startRealAPIWith is startRealAPI; without fold nothing acts on a cancel
// request, as in a federation with no leader.
func startRealAPIWith(t *testing.T, fold bool) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	startCtx, startCancel := context.WithTimeout(ctx, 30*time.Second)
	defer startCancel()
	srv, err := embedetcd.Start(startCtx, embedetcd.Config{DataDir: t.TempDir(), UnsafeNoFsync: true})
	if err != nil {
		t.Fatalf("start embedded etcd: %v", err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	cli, err := srv.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	st, err := store.New(cli, store.Options{MaxTxnOps: srv.MaxTxnOps()})
	if err != nil {
		t.Fatal(err)
	}
	cache, err := store.NewCache(cli, store.Prefix(store.KindWorkloads))
	if err != nil {
		t.Fatal(err)
	}
	cacheDone := make(chan struct{})
	go func() { defer close(cacheDone); _ = cache.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-cacheDone })
	// The loop's part of a cancel (hub/dispatch tests the real one).
	cancelWait := 300 * time.Millisecond
	if fold {
		folded := make(chan struct{})
		go func() { defer close(folded); cancelfold.Run(ctx, st, 5*time.Millisecond, nil) }()
		t.Cleanup(func() { cancel(); <-folded })
		cancelWait = 0
	}
	svc, err := api.New(api.Deps{Store: st, Workloads: cache, HubID: "hub-e2e", Version: "v0-e2e", CancelWait: cancelWait})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(api.ServerOptions(nil, nil, 1<<20)...)
	svc.Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	select {
	case <-cache.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("workload cache not ready after 10s")
	}
	return lis.Addr().String()
}

// squash collapses runs of spaces, so assertions do not depend on column
// widths.
func squash(s string) string {
	return regexp.MustCompile(` +`).ReplaceAllString(s, " ")
}

// mustRun runs a command line that must succeed.
func mustRun(t *testing.T, addr, stdin string, args ...string) result {
	t.Helper()
	r := runCLI(t, addr, stdin, args...)
	if r.code != ExitOK {
		t.Fatalf("meridianctl %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// TestAgainstRealAPI drives submit, get, list, explain, cancel, queues and
// the error paths through the CLI against the real API service on a real
// embedded etcd.
func TestAgainstRealAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd; skipped with -short")
	}
	addr := startRealAPI(t)

	r := mustRun(t, addr, "", "queue", "apply", "-f", "../../examples/queues/acme.yaml")
	if got := strings.Count(r.stdout, " created\n"); got != 5 {
		t.Fatalf("queue apply created %d queues, want 5:\n%s", got, r.stdout)
	}
	r = mustRun(t, addr, "", "queue", "apply", "-f", "../../examples/queues/acme.yaml")
	if got := len(regexp.MustCompile(`(?m)^queue \S+ unchanged$`).FindAllString(r.stdout, -1)); got != 5 {
		t.Errorf("second apply: %d unchanged, want 5 (apply must be idempotent):\n%s", got, r.stdout)
	}
	// Apply changes only what the file writes: the weight here. The three
	// quota classes the file leaves out are kept on the real hub.
	r = mustRun(t, addr, "path: acme\nweight: 2\nquotas:\n- accelerator_class: nvidia-h100-80gb\n  nominal_milli_gpus: 64000\n", "queue", "apply", "-f", "-")
	if !strings.HasPrefix(r.stdout, "queue acme configured\n  ~ weight: 1 -> 2\n  = quota nvidia-a100-40gb: kept, not in the file (--prune removes it)\n") {
		t.Errorf("apply of a partial file printed:\n%s", r.stdout)
	}
	r = mustRun(t, addr, "", "queue", "get", "acme", "-o", "json")
	if n := strings.Count(r.stdout, "accelerator_class"); n != 4 || !strings.Contains(r.stdout, `"weight": 2`) {
		t.Errorf("after a partial apply acme has %d quotas (want 4 kept) :\n%s", n, r.stdout)
	}
	mustRun(t, addr, "", "queue", "apply", "-f", "../../examples/queues/acme.yaml")
	r = runCLI(t, addr, "", "queue", "create", "-f", "../../examples/queues/acme.yaml")
	if r.code != ExitConflict || !strings.Contains(r.stderr, "queue acme already exists (use 'meridianctl queue apply' to update it)") {
		t.Errorf("create over existing: exit %d stderr %q", r.code, r.stderr)
	}

	// Submit with a key, twice: one workload.
	r = mustRun(t, addr, "", "submit", "-f", "../../examples/workloads/gang.yaml", "--idempotency-key", "e2e-1", "-o", "json")
	var sub struct {
		Workload struct {
			ID     string `json:"id"`
			Status struct {
				Phase string `json:"phase"`
			} `json:"status"`
		} `json:"workload"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &sub); err != nil {
		t.Fatalf("submit -o json is not JSON: %v\n%s", err, r.stdout)
	}
	id := sub.Workload.ID
	if !regexp.MustCompile(`^wl-[0-9A-Z]{26}$`).MatchString(id) || sub.Workload.Status.Phase != "WORKLOAD_PHASE_QUEUED" {
		t.Fatalf("submitted workload id %q phase %q", id, sub.Workload.Status.Phase)
	}
	r = mustRun(t, addr, "", "submit", "-f", "../../examples/workloads/gang.yaml", "--idempotency-key", "e2e-1")
	if want := "workload " + id + " already submitted with idempotency key \"e2e-1\" (phase QUEUED)\n"; r.stdout != want {
		t.Errorf("replayed submit printed %q, want %q", r.stdout, want)
	}
	// From stdin, without a key: a second workload.
	r = mustRun(t, addr, "", "submit", "-f", "../../examples/workloads/fractional.yaml")
	other := strings.Fields(r.stdout)[1]
	if other == id || !strings.HasPrefix(r.stdout, "workload wl-") || !strings.HasSuffix(r.stdout, " submitted to queue acme/product (phase QUEUED)\n") {
		t.Errorf("second submit printed %q", r.stdout)
	}

	r = mustRun(t, addr, "", "get", id)
	for _, want := range []string{"ID: " + id, "Queue: acme/research", "Phase: QUEUED", "Pending reason: ", " worker 4 - 8 80Gi nvidia-h100-80gb - nvlink-domain\n"} {
		if !strings.Contains(squash(r.stdout), want) {
			t.Errorf("get output lacks %q:\n%s", want, r.stdout)
		}
	}

	r = mustRun(t, addr, "", "list")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], other) || !strings.HasPrefix(lines[2], id) {
		t.Errorf("list (newest first) =\n%s", r.stdout)
	}
	r = mustRun(t, addr, "", "list", "--queue", "acme/research", "-l", "team=research", "--phase", "queued")
	if !strings.Contains(r.stdout, id) || strings.Contains(r.stdout, other) {
		t.Errorf("filtered list =\n%s", r.stdout)
	}
	r = mustRun(t, addr, "", "list", "--phase", "running")
	if r.stdout != "" || r.stderr != "no workloads match\n" {
		t.Errorf("empty list printed stdout %q stderr %q", r.stdout, r.stderr)
	}

	r = mustRun(t, addr, "", "explain", id)
	if !strings.Contains(squash(r.stdout), "Workload: "+id) || !strings.Contains(squash(r.stdout), "Phase: QUEUED") {
		t.Errorf("explain =\n%s", r.stdout)
	}

	r = mustRun(t, addr, "", "cancel", id, "--reason", "e2e done")
	if r.stdout != "workload "+id+" cancelled\n" {
		t.Errorf("cancel printed %q", r.stdout)
	}
	r = mustRun(t, addr, "", "get", id, "-o", "yaml")
	if !strings.Contains(r.stdout, "phase: WORKLOAD_PHASE_CANCELLED") {
		t.Errorf("after cancel, get -o yaml =\n%s", r.stdout)
	}
	r = mustRun(t, addr, "", "list", "--phase", "cancelled", "-o", "json")
	if !strings.Contains(r.stdout, id) || strings.Contains(r.stdout, other) {
		t.Errorf("cancelled list =\n%s", r.stdout)
	}

	r = mustRun(t, addr, "", "queues")
	for _, want := range []string{"\nacme 1 - 0 0 nvidia-a100-40gb 24 unlimited all 0 0 0\n", "\n├─ research 3 - 0 0 * 0 unlimited all 0 0 0\n", "\n└─ sandbox 1 - 0 0 nvidia-l40s-48gb 4 0 all 0 0 0\n", "\nFAIRSHARE: leaf queues only"} {
		if !strings.Contains(squash(r.stdout), want) {
			t.Errorf("queues output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = mustRun(t, addr, "", "version")
	if !strings.Contains(r.stdout, "Hub:    v0-e2e (hub-e2e at HUB, ") {
		t.Errorf("version =\n%s", r.stdout)
	}

	// watch --initial lists what exists, then streams new changes until
	// interrupted.
	var out, errb syncBuffer
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	done := make(chan int, 1)
	go func() {
		done <- Main(wctx, []string{"watch", "--hub", addr, "--initial", "--queue", "acme/product"}, Env{Stdout: &out, Stderr: &errb})
	}()
	waitFor := func(what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(out.String(), what) {
			if time.Now().After(deadline) {
				t.Fatalf("watch printed no %q within 10s; stdout:\n%s\nstderr:\n%s", what, out.String(), errb.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("BOOKMARK")
	if !strings.Contains(squash(out.String()), " ADDED "+other+" QUEUED ") {
		t.Errorf("watch --initial did not list %s:\n%s", other, out.String())
	}
	mustRun(t, addr, "", "cancel", other)
	waitFor(" MODIFIED  " + other)
	wcancel()
	select {
	case code := <-done:
		if code != ExitOK {
			t.Errorf("interrupted watch exit %d; stderr %q", code, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not stop within 10s of the interrupt")
	}
	if strings.Contains(out.String(), id) {
		t.Errorf("watch --queue acme/product showed %s from acme/research:\n%s", id, out.String())
	}

	// Error paths, as the real hub reports them.
	missing := "wl-00000000000000000000000000"
	r = runCLI(t, addr, "", "get", missing)
	if r.code != ExitNotFound || r.stderr != "error: workload "+missing+" not found\n" {
		t.Errorf("get missing: exit %d stderr %q", r.code, r.stderr)
	}
	r = runCLI(t, addr, "", "cancel", missing)
	if r.code != ExitNotFound {
		t.Errorf("cancel missing: exit %d stderr %q", r.code, r.stderr)
	}
	// Not even a workload id: still "not found", never "rejected".
	for _, cmd := range []string{"get", "cancel", "explain"} {
		r = runCLI(t, addr, "", cmd, "nope")
		if r.code != ExitNotFound || !strings.HasPrefix(r.stderr, "error: workload nope not found: ") {
			t.Errorf("%s nope: exit %d stderr %q", cmd, r.code, r.stderr)
		}
	}
	r = runCLI(t, addr, "", "submit", "-f", "testdata/input/unknown-queue.yaml")
	if r.code != ExitInvalid || !strings.HasPrefix(r.stderr, "error: the hub rejected the workload (1 problem):\n  queue: ") {
		t.Errorf("unknown queue: exit %d stderr %q", r.code, r.stderr)
	}
}

// Without a leader, a cancel is taken and waits: the CLI says so rather
// than naming a cluster.
func TestCancelWithoutALeaderAgainstRealAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd; skipped with -short")
	}
	addr := startRealAPIWith(t, false)
	mustRun(t, addr, "", "queue", "apply", "-f", "../../examples/queues/acme.yaml")
	r := mustRun(t, addr, "", "submit", "-f", "../../examples/workloads/gang.yaml")
	id := strings.Fields(r.stdout)[1]
	r = mustRun(t, addr, "", "cancel", id, "--reason", "no leader yet")
	if want := "workload " + id + ": cancel requested; it takes effect once a hub leads (phase QUEUED)\n"; r.stdout != want {
		t.Errorf("cancel printed %q, want %q", r.stdout, want)
	}
}
