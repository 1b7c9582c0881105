package cli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// result is what one command line produced.
type result struct {
	code   int
	stdout string
	stderr string
}

// runCLI runs one command line against the hub at addr (through
// MERIDIAN_HUB), with the clock at t0+1h, and returns what it printed.
// Any occurrence of addr in the output is replaced by HUB so golden files
// do not depend on the port.
func runCLI(t *testing.T, addr, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code := Main(ctx, args, Env{
		Stdin:  strings.NewReader(stdin),
		Stdout: &out,
		Stderr: &errb,
		Getenv: func(k string) string {
			if k == HubEnv {
				return addr
			}
			return ""
		},
		Now: func() time.Time { return t0.Add(time.Hour) },
	})
	clean := func(s string) string {
		if addr != "" {
			s = strings.ReplaceAll(s, addr, "HUB")
		}
		return strings.ReplaceAll(s, runtime.Version(), "GOVERSION")
	}
	return result{code: code, stdout: clean(out.String()), stderr: clean(errb.String())}
}

// golden compares r with testdata/<test name>.golden, rewriting it with
// -update.
func golden(t *testing.T, args []string, r result) {
	t.Helper()
	shown := make([]string, len(args))
	for i, a := range args {
		shown[i] = a
		if a == "" || strings.ContainsAny(a, " \t\"'") {
			shown[i] = strconv.Quote(a)
		}
	}
	got := fmt.Sprintf("$ meridianctl %s\nexit %d\n-- stdout --\n%s-- stderr --\n%s", strings.Join(shown, " "), r.code, r.stdout, r.stderr)
	path := filepath.Join("testdata", filepath.FromSlash(t.Name())+".golden")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run go test ./internal/cli -update to create it): %v", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run with -update after checking):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// TestCommands runs every command against a seeded fake hub and compares
// the exact output and exit code with golden files.
func TestCommands(t *testing.T) {
	hub := newFakeHub()
	hub.seed()
	addr := hub.serve(t)
	gang, err := os.ReadFile("../../examples/workloads/gang.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		args  []string
		stdin string
		code  int
	}{
		// list
		{name: "list", args: []string{"list"}},
		{name: "list_json", args: []string{"list", "-o", "json", "--queue", "acme/vision"}},
		{name: "list_yaml", args: []string{"list", "-o", "yaml", "--phase", "failed"}},
		{name: "list_filters", args: []string{"list", "--queue", "acme", "--phase", "queued,RUNNING", "-l", "team=vision"}},
		{name: "list_cluster", args: []string{"list", "--cluster", "east-h100"}},
		{name: "list_limit", args: []string{"list", "--limit", "3"}},
		{name: "list_none", args: []string{"list", "--queue", "nobody"}},
		{name: "list_bad_phase", args: []string{"list", "--phase", "runing"}, code: ExitUsage},
		{name: "list_bad_selector", args: []string{"list", "-l", "team"}, code: ExitUsage},
		{name: "list_bad_output", args: []string{"list", "-o", "xml"}, code: ExitUsage},
		// get
		{name: "get_running", args: []string{"get", "wl-04"}},
		{name: "get_queued", args: []string{"get", "wl-05"}},
		{name: "get_failed", args: []string{"get", "wl-02"}},
		{name: "get_json", args: []string{"get", "wl-02", "-o", "json"}},
		{name: "get_yaml", args: []string{"get", "wl-01", "-o", "yaml"}},
		{name: "get_not_found", args: []string{"get", "wl-nope"}, code: ExitNotFound},
		{name: "get_bad_id", args: []string{"get", "nope"}, code: ExitNotFound},
		{name: "get_missing_id", args: []string{"get"}, code: ExitUsage},
		{name: "get_extra_args", args: []string{"get", "a", "b"}, code: ExitUsage},
		// explain
		{name: "explain", args: []string{"explain", "wl-03"}},
		{name: "explain_json", args: []string{"explain", "wl-03", "-o", "json"}},
		{name: "explain_not_found", args: []string{"explain", "wl-nope"}, code: ExitNotFound},
		{name: "explain_bad_id", args: []string{"explain", "nope"}, code: ExitNotFound},
		{name: "explain_running", args: []string{"explain", "wl-04"}},
		{name: "explain_finished", args: []string{"explain", "wl-01"}},
		{name: "explain_queued_no_detail", args: []string{"explain", "wl-05"}},
		// queues and clusters
		{name: "queues", args: []string{"queues"}},
		{name: "queues_prefix", args: []string{"queues", "--prefix", "acme/vision"}},
		{name: "queues_yaml", args: []string{"queues", "--prefix", "acme/search/inference", "-o", "yaml"}},
		{name: "clusters", args: []string{"clusters"}},
		{name: "clusters_lost", args: []string{"clusters", "--state", "lost"}},
		{name: "clusters_json", args: []string{"clusters", "--state", "draining", "-o", "json"}},
		{name: "clusters_bad_state", args: []string{"clusters", "--state", "gone"}, code: ExitUsage},
		// watch
		{name: "watch", args: []string{"watch"}},
		{name: "watch_json", args: []string{"watch", "-o", "json", "--queue", "acme/vision"}},
		{name: "watch_since", args: []string{"watch", "--since-revision", "11"}},
		{name: "watch_bad_phase", args: []string{"watch", "--phase", "runing"}, code: ExitUsage},
		// submit: local problems never reach the hub
		{name: "submit_bad_fraction", args: []string{"submit", "-f", "testdata/input/bad-fraction.yaml"}, code: ExitInvalid},
		{name: "submit_many_problems", args: []string{"submit", "-f", "testdata/input/many-problems.yaml"}, code: ExitInvalid},
		{name: "submit_bad_yaml", args: []string{"submit", "-f", "testdata/input/bad-yaml.yaml"}, code: ExitInvalid},
		{name: "submit_unknown_field", args: []string{"submit", "-f", "testdata/input/unknown-field.yaml"}, code: ExitInvalid},
		{name: "submit_missing_file", args: []string{"submit", "-f", "testdata/input/does-not-exist.yaml"}, code: ExitUsage},
		{name: "submit_no_file", args: []string{"submit"}, code: ExitUsage},
		{name: "submit_empty_stdin", args: []string{"submit", "-f", "-"}, code: ExitInvalid},
		{name: "submit_dry_run", args: []string{"submit", "--dry-run", "-f", "../../examples/workloads/elastic.yaml"}},
		// submit: the hub's own verdict
		{name: "submit_unknown_queue", args: []string{"submit", "-f", "testdata/input/unknown-queue.yaml"}, code: ExitInvalid},
		{name: "submit_stdin", args: []string{"submit", "-f", "-"}, stdin: string(gang)},
		{name: "submit_key", args: []string{"submit", "-f", "../../examples/workloads/fractional.yaml", "--idempotency-key", "k-1"}},
		{name: "submit_key_replayed", args: []string{"submit", "-f", "../../examples/workloads/fractional.yaml", "--idempotency-key", "k-1"}},
		{name: "submit_json", args: []string{"submit", "-f", "../../examples/workloads/gang.yaml", "--idempotency-key", "k-2", "-o", "json"}},
		{name: "submit_reject_never_fits", args: []string{"submit", "-f", "testdata/input/huge.yaml", "--reject-if-never-fits"}, code: ExitInvalid},
		// cancel
		{name: "cancel_queued", args: []string{"cancel", "wl-05", "--reason", "not needed"}},
		{name: "cancel_running", args: []string{"cancel", "wl-04"}},
		{name: "cancel_finished", args: []string{"cancel", "wl-01"}},
		{name: "cancel_not_found", args: []string{"cancel", "wl-nope"}, code: ExitNotFound},
		{name: "cancel_bad_id", args: []string{"cancel", "nope"}, code: ExitNotFound},
		// queue create/apply
		{name: "queue_create_exists", args: []string{"queue", "create", "-f", "testdata/input/queue-acme.yaml"}, code: ExitConflict},
		{name: "queue_create_no_parent", args: []string{"queue", "create", "-f", "testdata/input/queue-orphan.yaml"}, code: ExitInvalid},
		{name: "queue_create_invalid", args: []string{"queue", "create", "-f", "testdata/input/queue-invalid.yaml"}, code: ExitInvalid},
		{name: "queue_create_dry_run", args: []string{"queue", "create", "--dry-run", "-f", "testdata/input/queue-new.yaml"}},
		{name: "queue_create_dry_run_no_parent", args: []string{"queue", "create", "--dry-run", "-f", "testdata/input/queue-orphan.yaml"}, code: ExitInvalid},
		{name: "queue_create_dry_run_exists", args: []string{"queue", "create", "--dry-run", "-f", "testdata/input/queue-acme.yaml"}, code: ExitConflict},
		{name: "queue_apply_dry_run", args: []string{"queue", "apply", "--dry-run", "-f", "testdata/input/queue-tree.yaml"}},
		{name: "queue_apply_dry_run_prune", args: []string{"queue", "apply", "--dry-run", "--prune", "-f", "testdata/input/queue-tree.yaml"}},
		{name: "queue_apply", args: []string{"queue", "apply", "-f", "testdata/input/queue-tree.yaml"}},
		{name: "queue_apply_again", args: []string{"queue", "apply", "-f", "testdata/input/queue-tree.yaml"}},
		{name: "queue_apply_prune", args: []string{"queue", "apply", "--prune", "-f", "testdata/input/queue-tree.yaml"}},
		{name: "queue_apply_example_dry_run", args: []string{"queue", "apply", "--dry-run", "-f", "../../examples/queues/acme.yaml"}},
		{name: "queue_no_subcommand", args: []string{"queue"}, code: ExitUsage},
		{name: "queue_get", args: []string{"queue", "get", "acme/vision"}},
		{name: "queue_get_not_found", args: []string{"queue", "get", "acme/nope"}, code: ExitNotFound},
		{name: "queue_delete_has_children", args: []string{"queue", "delete", "acme/search"}, code: ExitInvalid},
		{name: "queue_delete", args: []string{"queue", "delete", "acme/search/inference"}},
		// cluster drain/resume
		{name: "cluster_drain", args: []string{"cluster", "drain", "east-h100", "--reason", "GPU driver upgrade"}},
		{name: "cluster_drained", args: []string{"clusters", "--state", "draining"}},
		{name: "cluster_resume", args: []string{"cluster", "resume", "east-h100", "-o", "yaml"}},
		{name: "cluster_drain_not_found", args: []string{"cluster", "drain", "mars"}, code: ExitNotFound},
		{name: "cluster_no_subcommand", args: []string{"cluster"}, code: ExitUsage},
		// misc
		{name: "watch_yaml", args: []string{"watch", "-o", "yaml", "--queue", "acme/search"}},
		{name: "version", args: []string{"version"}},
		{name: "version_json", args: []string{"version", "-o", "json", "--client"}},
		{name: "help", args: []string{"--help"}},
		{name: "help_list", args: []string{"list", "--help"}},
		{name: "help_queue_apply", args: []string{"queue", "apply", "--help"}},
		{name: "help_explain", args: []string{"explain", "--help"}},
		{name: "unknown_command", args: []string{"frobnicate"}, code: ExitUsage},
		{name: "hub_url", args: []string{"list", "--hub", "http://127.0.0.1:8080"}, code: ExitUsage},
		{name: "bad_timeout", args: []string{"list", "--timeout", "0s"}, code: ExitUsage},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, addr, tc.stdin, tc.args...)
			if r.code != tc.code {
				t.Errorf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, tc.code, r.stdout, r.stderr)
			}
			if tc.code != ExitOK && !strings.HasPrefix(r.stderr, "error: ") {
				t.Errorf("a failing command must print an error: line; stderr = %q", r.stderr)
			}
			golden(t, tc.args, r)
		})
	}
}

// freeClosedPort returns a loopback address nothing listens on.
func freeClosedPort(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func TestHubUnreachable(t *testing.T) {
	addr := freeClosedPort(t)
	for name, args := range map[string][]string{
		"list":     {"list"},
		"get":      {"get", "wl-1"},
		"queues":   {"queues"},
		"clusters": {"clusters"},
		"submit":   {"submit", "-f", "../../examples/workloads/gang.yaml"},
		"watch":    {"watch"},
		"version":  {"version"},
	} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			r := runCLI(t, addr, "", args...)
			if r.code != ExitUnavailable {
				t.Errorf("exit code %d, want %d (stderr %q)", r.code, ExitUnavailable, r.stderr)
			}
			want := "error: cannot reach the hub at HUB: is meridian-hub running? (set --hub or MERIDIAN_HUB)\n"
			if r.stderr != want {
				t.Errorf("stderr = %q, want %q", r.stderr, want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %s to report an unreachable hub; want fail-fast", d)
			}
		})
	}
}

func TestHubFlagOverridesEnv(t *testing.T) {
	hub := newFakeHub()
	hub.seed()
	addr := hub.serve(t)
	// MERIDIAN_HUB points nowhere; --hub points at the fake.
	r := runCLI(t, freeClosedPort(t), "", "--hub", addr, "get", "wl-04", "-o", "json")
	if r.code != ExitOK || !strings.Contains(r.stdout, `"id": "wl-04"`) {
		t.Fatalf("--hub not used: code %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
}

func TestListFollowsPages(t *testing.T) {
	hub := newFakeHub()
	hub.seed()
	hub.pageCap = 2
	addr := hub.serve(t)
	r := runCLI(t, addr, "", "list", "-o", "json", "--queue", "acme", "-l", "team=vision", "-l", "tier!=prod", "--phase", "queued", "--phase", "running,accepted", "--cluster", "")
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if len(hub.listReqs) != 1 {
		t.Fatalf("got %d list requests, want 1 (one match fits one page)", len(hub.listReqs))
	}
	req := hub.listReqs[0]
	if req.GetLabelSelector() != "team=vision,tier!=prod" {
		t.Errorf("label_selector = %q", req.GetLabelSelector())
	}
	if got := fmt.Sprint(req.GetPhase()); got != "[WORKLOAD_PHASE_QUEUED WORKLOAD_PHASE_RUNNING WORKLOAD_PHASE_ACCEPTED]" {
		t.Errorf("phase = %s", got)
	}
	if req.GetQueue() != "acme" || req.GetPageSize() != listPageSize {
		t.Errorf("queue %q page_size %d", req.GetQueue(), req.GetPageSize())
	}

	hub.listReqs = nil
	r = runCLI(t, addr, "", "list")
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if n := len(hub.listReqs); n != 3 {
		t.Fatalf("5 workloads at 2 per page took %d requests, want 3", n)
	}
	for i, want := range []string{"", "off-2", "off-4"} {
		if got := hub.listReqs[i].GetPageToken(); got != want {
			t.Errorf("request %d page_token %q, want %q", i, got, want)
		}
	}
	for _, id := range []string{"wl-01", "wl-02", "wl-03", "wl-04", "wl-05"} {
		if !strings.Contains(r.stdout, id) {
			t.Errorf("list output lacks %s:\n%s", id, r.stdout)
		}
	}

	hub.listReqs = nil
	r = runCLI(t, addr, "", "list", "--limit", "3")
	if r.code != ExitOK || strings.Count(r.stdout, "\nwl-") != 3 {
		t.Fatalf("--limit 3: exit %d, output:\n%s", r.code, r.stdout)
	}
	if got := []int32{hub.listReqs[0].GetPageSize(), hub.listReqs[1].GetPageSize()}; got[0] != 3 || got[1] != 1 {
		t.Errorf("page sizes %v, want [3 1] (never ask for more than the limit)", got)
	}
}

func TestSubmitNothingSentWhenInvalid(t *testing.T) {
	hub := newFakeHub()
	hub.seed()
	addr := hub.serve(t)
	for _, f := range []string{"bad-fraction.yaml", "many-problems.yaml", "bad-yaml.yaml", "unknown-field.yaml"} {
		r := runCLI(t, addr, "", "submit", "-f", filepath.Join("testdata", "input", f))
		if r.code != ExitInvalid {
			t.Errorf("%s: exit %d, want %d", f, r.code, ExitInvalid)
		}
	}
	if hub.submits != 0 {
		t.Fatalf("the hub stored %d workloads from invalid files", hub.submits)
	}
}

func TestSubmitIdempotencyKey(t *testing.T) {
	hub := newFakeHub()
	hub.seed()
	addr := hub.serve(t)
	var ids []string
	for i := 0; i < 3; i++ {
		r := runCLI(t, addr, "", "submit", "-f", "../../examples/workloads/gang.yaml", "--idempotency-key", "nightly-42")
		if r.code != ExitOK {
			t.Fatalf("submit %d: exit %d: %s", i, r.code, r.stderr)
		}
		ids = append(ids, strings.Fields(r.stdout)[1])
	}
	if hub.submits != 1 {
		t.Errorf("3 submits with one key stored %d workloads, want 1", hub.submits)
	}
	if ids[0] != ids[1] || ids[1] != ids[2] {
		t.Errorf("ids differ across replays: %v", ids)
	}
	r := runCLI(t, addr, "", "submit", "-f", "../../examples/workloads/gang.yaml")
	if r.code != ExitOK || hub.submits != 2 {
		t.Errorf("a submit without a key must create a new workload: exit %d, stored %d", r.code, hub.submits)
	}
}

func TestQueueApplyWrites(t *testing.T) {
	hub := newFakeHub()
	addr := hub.serve(t)
	r := runCLI(t, addr, "", "queue", "apply", "-f", "../../examples/queues/acme.yaml")
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	want := "create acme,create acme/research,create acme/product,create acme/platform,create acme/sandbox"
	if got := strings.Join(hub.queueWrites, ","); got != want {
		t.Errorf("writes %s\nwant %s", got, want)
	}
	classes := func(path string) string {
		var cs []string
		for _, q := range hub.queues[path].GetQuotas() {
			cs = append(cs, q.GetAcceleratorClass())
		}
		return strings.Join(cs, ",")
	}
	before := classes("acme")

	// A file that sets the weight and lists one of acme's four quota
	// classes, unchanged: only the weight is written, the other classes
	// are kept, and the update is conditional on the revision it read.
	file := "path: acme\nweight: 2\nquotas:\n- accelerator_class: nvidia-h100-80gb\n  nominal_milli_gpus: 64000\n"
	hub.queueWrites = nil
	r = runCLI(t, addr, file, "queue", "apply", "--dry-run", "-f", "-")
	if r.code != ExitOK || len(hub.queueWrites) != 0 {
		t.Fatalf("--dry-run: exit %d, writes %v (want none)\n%s%s", r.code, hub.queueWrites, r.stdout, r.stderr)
	}
	wantOut := "queue acme configured (dry run)\n  ~ weight: 1 -> 2\n" +
		"  = quota nvidia-a100-40gb: kept, not in the file (--prune removes it)\n" +
		"  = quota nvidia-gb200-192gb: kept, not in the file (--prune removes it)\n" +
		"  = quota nvidia-l40s-48gb: kept, not in the file (--prune removes it)\n" +
		"0 created, 1 configured, 0 unchanged (dry run: nothing was changed)\n"
	if r.stdout != wantOut {
		t.Errorf("--dry-run printed\n%s\nwant\n%s", r.stdout, wantOut)
	}
	rev := hub.queues["acme"].GetRevision()
	r = runCLI(t, addr, file, "queue", "apply", "-f", "-")
	if r.code != ExitOK {
		t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if got := strings.Join(hub.queueWrites, ","); got != "update acme [weight]" {
		t.Errorf("writes %q, want one update of the weight only", got)
	}
	if got := hub.updates[0].GetQueue().GetRevision(); got != rev {
		t.Errorf("update sent revision %d, want %d (the one it compared against)", got, rev)
	}
	if got := hub.queues["acme"].GetWeight(); got != 2 {
		t.Errorf("weight after apply = %d, want 2", got)
	}
	if got := classes("acme"); got != before {
		t.Errorf("quota classes after apply = %s, want %s kept", got, before)
	}

	// --prune makes the file's list the whole list.
	hub.queueWrites = nil
	r = runCLI(t, addr, file, "queue", "apply", "--prune", "-f", "-")
	if r.code != ExitOK || !strings.Contains(r.stdout, "  - quota nvidia-l40s-48gb: nominal 24, borrow limit unlimited, lend limit all\n") {
		t.Fatalf("--prune: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if got := classes("acme"); got != "nvidia-h100-80gb" || strings.Join(hub.queueWrites, ",") != "update acme [quotas]" {
		t.Errorf("after --prune: classes %s, writes %v", got, hub.queueWrites)
	}

	// A description the file leaves out is kept; one it writes is set.
	r = runCLI(t, addr, "path: acme/sandbox\nweight: 1\n", "queue", "apply", "-f", "-")
	if r.code != ExitOK || r.stdout != "queue acme/sandbox unchanged\n" || hub.queues["acme/sandbox"].GetDescription() == "" {
		t.Errorf("omitted description: exit %d stdout %q, description %q", r.code, r.stdout, hub.queues["acme/sandbox"].GetDescription())
	}

	// The queue changes between apply's read and its write: nothing is
	// overwritten and the user is told to run it again.
	hub.mu.Lock()
	hub.staleQueues = true
	hub.mu.Unlock()
	hub.queueWrites = nil
	r = runCLI(t, addr, "path: acme\nweight: 7\n", "queue", "apply", "-f", "-")
	if r.code != ExitConflict || !strings.Contains(r.stderr, "queue acme changed on the hub while apply was comparing it; nothing was written") {
		t.Errorf("stale revision: exit %d stderr %q", r.code, r.stderr)
	}
	if got := hub.queues["acme"].GetWeight(); got != 2 || len(hub.queueWrites) != 0 {
		t.Errorf("a stale apply wrote: weight %d, writes %v", got, hub.queueWrites)
	}
}

func TestWorkloadExamplesAreValid(t *testing.T) {
	files, err := filepath.Glob("../../examples/workloads/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("found %d example workloads, want at least 3 (gang, fractional, elastic)", len(files))
	}
	kinds := map[string]bool{}
	for _, f := range files {
		r := runCLI(t, "", "", "submit", "--dry-run", "-f", f)
		if r.code != ExitOK {
			t.Errorf("%s: exit %d: %s", f, r.code, r.stderr)
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		w, err := decodeForTest(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, ps := range w.GetPodSets() {
			g := ps.GetResources().GetGpuMilli()
			switch {
			case g > 0 && g < 1000:
				kinds["fractional"] = true
			case ps.GetMinReplicas() > 0:
				kinds["elastic"] = true
			}
		}
		if len(w.GetPodSets()) > 1 || w.GetPodSets()[0].GetReplicas() > 1 && w.GetPodSets()[0].GetMinReplicas() == 0 {
			kinds["gang"] = true
		}
	}
	for _, k := range []string{"gang", "fractional", "elastic"} {
		if !kinds[k] {
			t.Errorf("no %s example under examples/workloads", k)
		}
	}
}

// TestWatchStopsCleanlyOnInterrupt: a watch runs until the user stops it,
// and stopping it is not an error.
func TestWatchStopsCleanlyOnInterrupt(t *testing.T) {
	hub := newFakeHub()
	hub.seed()
	hub.watchBlock = true
	addr := hub.serve(t)
	var out, errb syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"watch", "--hub", addr, "--timeout", "100ms"}, Env{Stdout: &out, Stderr: &errb})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "BOOKMARK") {
		if time.Now().After(deadline) {
			t.Fatalf("no events after 10s; stdout %q stderr %q", out.String(), errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The watch outlives --timeout: it is not bounded by it.
	time.Sleep(300 * time.Millisecond)
	select {
	case code := <-done:
		t.Fatalf("watch ended by itself with exit %d; stderr %q", code, errb.String())
	default:
	}
	cancel()
	select {
	case code := <-done:
		if code != ExitOK || errb.String() != "" {
			t.Fatalf("interrupted watch: exit %d stderr %q", code, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not stop within 10s of the interrupt")
	}
	if n := strings.Count(out.String(), "\n"); n != 4 {
		t.Errorf("printed %d lines, want a header and 3 events:\n%s", n, out.String())
	}
}

// The table shows only what the basic view carries, so a watch asks for
// it; JSON and YAML print whole workloads unless --view says otherwise.
func TestWatchAsksForTheViewItPrints(t *testing.T) {
	hub := newFakeHub()
	hub.seed()
	addr := hub.serve(t)
	basic, full := meridianv1.WorkloadView_WORKLOAD_VIEW_BASIC, meridianv1.WorkloadView_WORKLOAD_VIEW_FULL
	for _, c := range []struct {
		args []string
		want meridianv1.WorkloadView
	}{
		{nil, basic},
		{[]string{"-o", "json"}, full},
		{[]string{"-o", "yaml"}, full},
		{[]string{"--view", "full"}, full},
		{[]string{"-o", "json", "--view", "BASIC"}, basic},
	} {
		var out, errb bytes.Buffer
		if code := Main(context.Background(), append([]string{"watch", "--hub", addr}, c.args...), Env{Stdout: &out, Stderr: &errb}); code != ExitOK {
			t.Fatalf("watch %v: exit %d, stderr %q", c.args, code, errb.String())
		}
		hub.mu.Lock()
		got := hub.views[len(hub.views)-1]
		hub.mu.Unlock()
		if got != c.want {
			t.Errorf("watch %v asked for %v, want %v", c.args, got, c.want)
		}
	}
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"watch", "--hub", addr, "--view", "everything"}, Env{Stdout: &out, Stderr: &errb}); code != ExitUsage || !strings.Contains(errb.String(), "--view") {
		t.Fatalf("--view everything: exit %d, stderr %q; want a usage error naming --view", code, errb.String())
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestTimeout(t *testing.T) {
	hub := newFakeHub()
	hub.seed()
	hub.slow = true
	addr := hub.serve(t)
	start := time.Now()
	r := runCLI(t, addr, "", "get", "wl-04", "--timeout", "200ms")
	if r.code != ExitUnavailable || r.stderr != "error: the hub at HUB did not answer within 200ms (raise --timeout)\n" {
		t.Errorf("exit %d stderr %q", r.code, r.stderr)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a 200ms timeout took %s", d)
	}
}

func TestHubErrorsMapToExitCodes(t *testing.T) {
	hub := newFakeHub()
	hub.seed()
	addr := hub.serve(t)
	for name, tc := range map[string]struct {
		err  error
		code int
		want string
	}{
		"no leader":  {status.Error(codes.Unavailable, "no leader elected yet"), ExitUnavailable, "error: the hub at HUB is unavailable: no leader elected yet; try again shortly\n"},
		"internal":   {status.Error(codes.Internal, "etcd: boom"), ExitError, "error: hub error (internal) on workload list: etcd: boom\n"},
		"denied":     {status.Error(codes.PermissionDenied, "team beta may not read acme"), ExitDenied, "error: you may not list workloads: team beta may not read acme\n"},
		"no token":   {status.Error(codes.Unauthenticated, "missing bearer token"), ExitDenied, "error: the hub did not accept your credentials: missing bearer token; none were sent: set --token, --token-file or MERIDIAN_TOKEN, choose a context that has credentials (--context, 'meridianctl config get-contexts'), or point MERIDIAN_CONFIG at a configuration file that has one (the demo prints its export line)\n"},
		"bad token":  {status.Error(codes.InvalidArgument, "page_token does not match the request"), ExitInvalid, "error: the hub rejected the workload list: page_token does not match the request\n"},
		"overloaded": {status.Error(codes.ResourceExhausted, "too many requests"), ExitError, "error: hub error (resource exhausted) on workload list: too many requests\n"},
	} {
		t.Run(name, func(t *testing.T) {
			hub.mu.Lock()
			hub.failWith = tc.err
			hub.mu.Unlock()
			r := runCLI(t, addr, "", "list")
			if r.code != tc.code || r.stderr != tc.want {
				t.Errorf("exit %d stderr %q; want exit %d stderr %q", r.code, r.stderr, tc.code, tc.want)
			}
		})
	}
}

// bigWorkloads adds n workloads of about size bytes each (in labels) to
// the hub, newest first.
func bigWorkloads(h *fakeHub, n, size int) {
	for i := 0; i < n; i++ {
		labels := map[string]string{}
		for k := 0; k < 8; k++ {
			labels[fmt.Sprintf("blob-%d", k)] = strings.Repeat("x", size/8)
		}
		h.workloads = append([]*meridianv1.Workload{{
			Id: fmt.Sprintf("wl-big%02d", i), Queue: "acme/research", Labels: labels, CreateTime: ts(55 * time.Minute),
			PodSets: []*meridianv1.PodSet{{Name: "w", Replicas: 1, Resources: &meridianv1.Resources{GpuMilli: 1000}}},
			Status:  &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED},
		}}, h.workloads...)
	}
}

// TestListLargePage: a page above gRPC's default 4 MiB receive limit
// (six workloads with 0.9 MB of labels each) lists, with and without
// --limit.
func TestListLargePage(t *testing.T) {
	hub := newFakeHub()
	hub.seed()
	hub.pageCap = 500
	bigWorkloads(hub, 6, 900_000)
	addr := hub.serve(t)
	for _, args := range [][]string{{"list"}, {"list", "--limit", "5"}, {"list", "-o", "json"}} {
		hub.listReqs = nil
		r := runCLI(t, addr, "", args...)
		if r.code != ExitOK {
			t.Fatalf("%v: exit %d stderr %q", args, r.code, r.stderr)
		}
		if len(hub.listReqs) != 1 {
			t.Errorf("%v: %d list requests, want 1 (a 5.4 MB page is within the client's limit)", args, len(hub.listReqs))
		}
		if !strings.Contains(r.stdout, "wl-big05") {
			t.Errorf("%v: output lacks wl-big05", args)
		}
	}
}

// TestListPageTooLarge: when a page is still above the client's limit,
// list asks again for smaller pages; when even one workload is too large
// it says so plainly, with a hint.
func TestListPageTooLarge(t *testing.T) {
	defer func(v int) { maxRecvMsgBytes = v }(maxRecvMsgBytes)
	maxRecvMsgBytes = 2 << 20
	hub := newFakeHub()
	hub.seed()
	hub.pageCap = 500
	bigWorkloads(hub, 6, 900_000)
	addr := hub.serve(t)
	r := runCLI(t, addr, "", "list")
	if r.code != ExitOK || strings.Count(r.stdout, "wl-big") != 6 || !strings.Contains(r.stdout, "wl-01") {
		t.Fatalf("list with 2 MiB limit: exit %d stderr %q\n%s", r.code, r.stderr, r.stdout)
	}
	var sizes []int32
	for _, req := range hub.listReqs {
		sizes = append(sizes, req.GetPageSize())
	}
	if sizes[0] != listPageSize || sizes[len(sizes)-1] > 2 {
		t.Errorf("page sizes %v: want %d first, then halved to at most 2", sizes, listPageSize)
	}

	maxRecvMsgBytes = 512 << 10
	r = runCLI(t, addr, "", "list", "--limit", "5")
	want := "error: the hub's answer to the workload list is 0.9 MiB, larger than meridianctl accepts (0.5 MiB); it was too large even at one workload per page; narrow the list with --queue, --phase, --cluster or -l\n"
	if r.code != ExitError || r.stderr != want {
		t.Errorf("exit %d stderr %q\nwant %q", r.code, r.stderr, want)
	}
}

// TestExplainEmptyFleet: "no cluster is registered" only when the hub
// has no cluster at all.
func TestExplainEmptyFleet(t *testing.T) {
	hub := newFakeHub()
	hub.seed()
	hub.clusters = nil
	addr := hub.serve(t)
	r := runCLI(t, addr, "", "explain", "wl-05")
	if r.code != ExitOK || !strings.Contains(r.stdout, "Clusters (best first):\n  none: no cluster is registered with the hub (start a meridian-agent in each cluster)\n") {
		t.Errorf("exit %d stdout:\n%s", r.code, r.stdout)
	}
	r = runCLI(t, addr, "", "explain", "wl-01")
	if r.code != ExitOK || strings.Contains(r.stdout, "registered") || !strings.Contains(r.stdout, "Phase:      SUCCEEDED\n") {
		t.Errorf("a finished workload's explain must not blame the fleet: exit %d stdout:\n%s", r.code, r.stdout)
	}
}

func TestSubmitRejectIfNeverFits(t *testing.T) {
	hub := newFakeHub()
	hub.seed()
	addr := hub.serve(t)
	mustRun(t, addr, "", "submit", "-f", "../../examples/workloads/gang.yaml")
	r := runCLI(t, addr, "", "submit", "-f", "testdata/input/huge.yaml", "--reject-if-never-fits")
	if r.code != ExitInvalid {
		t.Errorf("exit %d stderr %q", r.code, r.stderr)
	}
	if len(hub.submitReqs) != 2 || hub.submitReqs[0].GetRejectIfNeverFits() || !hub.submitReqs[1].GetRejectIfNeverFits() {
		t.Errorf("reject_if_never_fits sent as %v", hub.submitReqs)
	}
	if hub.submits != 1 {
		t.Errorf("stored %d workloads, want 1 (the rejected one is not stored)", hub.submits)
	}
}
