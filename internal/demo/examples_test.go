package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	examplefiles "github.com/meridian-gpu/meridian/examples"
	"github.com/meridian-gpu/meridian/hub/authz"
	hubconfig "github.com/meridian-gpu/meridian/hub/config"
	"github.com/meridian-gpu/meridian/hub/scheduler"
	"github.com/meridian-gpu/meridian/hub/sim"
	"github.com/meridian-gpu/meridian/internal/cli"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	agentconfig "github.com/meridian-gpu/meridian/spoke-agent/config"
)

// TestExamplesRun applies every file under examples/ to a demo hub as a
// user would (meridianctl queue apply / submit, meridian-sim's scenario
// runner) and checks that it does what its comment promises: the queue
// tree is the demo's own, so applying it changes nothing; each workload
// reaches the phase, and for one left waiting the pending reason code, of
// its "# expect:" line.
func TestExamplesRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	o := DefaultOptions()
	o.GRPCAddr, o.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	o.TimeScale = 600 // a 10-minute example runs for a second
	f, err := startFederation(ctx, o, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()

	files, err := fs.Glob(examplefiles.FS, "*/*.yaml")
	if err != nil || len(files) < 8 {
		t.Fatalf("examples: %v, %v", files, err)
	}
	// Every file a user finds in examples/ is one the test runs: a new
	// file, or a new folder the embed line does not list, fails here.
	err = fs.WalkDir(os.DirFS(path.Join("..", "..", "examples")), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, ".go") {
			return err
		}
		if !slices.Contains(files, p) {
			t.Errorf("examples/%s is not run by TestExamplesRun: add it to examples/embed.go and give it a check", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		t.Run(name, func(t *testing.T) {
			data, err := examplefiles.FS.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			onDisk := path.Join("..", "..", "examples", name)
			switch path.Dir(name) {
			case "queues":
				checkQueueExample(ctx, t, f, onDisk)
			case "workloads":
				checkWorkloadExample(ctx, t, f, onDisk, string(data))
			case "sim":
				checkSimExample(t, data)
			case "config":
				checkConfigExample(t, name, data)
			default:
				t.Fatalf("no check for examples/%s: add one", name)
			}
		})
	}
}

// checkQueueExample applies the tree to a hub that already has it: every
// queue must stay exactly as it was.
func checkQueueExample(ctx context.Context, t *testing.T, f *federation, file string) {
	before := queueSpecs(ctx, t, f)
	out, code := meridianctl(ctx, f, "queue", "apply", "-f", file)
	if code != cli.ExitOK {
		t.Fatalf("queue apply: exit %d\n%s", code, out)
	}
	after := queueSpecs(ctx, t, f)
	if len(after) < 5 || !maps.EqualFunc(before, after, func(a, b *meridianv1.Queue) bool { return proto.Equal(a, b) }) {
		t.Fatalf("applying the demo's own tree changed it:\nbefore %v\nafter  %v\n%s", before, after, out)
	}
}

// queueSpecs returns the hub's queues by path, without server-set fields.
func queueSpecs(ctx context.Context, t *testing.T, f *federation) map[string]*meridianv1.Queue {
	t.Helper()
	resp, err := f.c.q.ListQueues(ctx, &meridianv1.ListQueuesRequest{PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*meridianv1.Queue{}
	for _, q := range resp.GetQueues() {
		out[q.GetPath()] = &meridianv1.Queue{Path: q.GetPath(), Weight: q.GetWeight(), Description: q.GetDescription(), Quotas: q.GetQuotas()}
	}
	return out
}

// checkWorkloadExample submits the file and waits for its "# expect:"
// line: `# expect: PHASE [REASON_CODE]`.
func checkWorkloadExample(ctx context.Context, t *testing.T, f *federation, file, text string) {
	phase, code := expectation(t, text)
	out, exit := meridianctl(ctx, f, "-o", "json", "submit", "-f", file)
	if exit != cli.ExitOK {
		t.Fatalf("submit: exit %d\n%s", exit, out)
	}
	var sub struct {
		Workload struct{ ID string } `json:"workload"`
	}
	if err := json.Unmarshal([]byte(out), &sub); err != nil || sub.Workload.ID == "" {
		t.Fatalf("submit printed no workload id (%v):\n%s", err, out)
	}
	got, gotCode, err := waitPhase(ctx, f.c, sub.Workload.ID, phase, code, time.Now().Add(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got != phase || (code != "" && gotCode != code) {
		w, _ := f.c.wl.GetWorkload(ctx, &meridianv1.GetWorkloadRequest{Id: sub.Workload.ID})
		t.Fatalf("%s is %s %s, its comment promises %s %s; status: %v", sub.Workload.ID, phaseName(got), gotCode, phaseName(phase), code, w.GetStatus())
	}
	if code != "" {
		// A workload left waiting must be explainable with the same code.
		ex, err := f.c.wl.ExplainWorkload(ctx, &meridianv1.ExplainWorkloadRequest{Id: sub.Workload.ID})
		if err != nil || ex.GetPendingReason() == "" {
			t.Fatalf("explain: %v %v", ex, err)
		}
	}
}

// expectation parses the file's "# expect:" line.
func expectation(t *testing.T, text string) (meridianv1.WorkloadPhase, string) {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, "# expect:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 || len(fields) > 2 {
			t.Fatalf("bad expect line %q: want '# expect: PHASE [REASON_CODE]'", line)
		}
		p, ok := meridianv1.WorkloadPhase_value["WORKLOAD_PHASE_"+fields[0]]
		if !ok {
			t.Fatalf("expect line %q: unknown phase %s", line, fields[0])
		}
		code := ""
		if len(fields) == 2 {
			code = fields[1]
		}
		return meridianv1.WorkloadPhase(p), code
	}
	t.Fatal("no '# expect: PHASE [REASON_CODE]' line: say what the example does on a demo hub")
	return 0, ""
}

// checkSimExample runs the scenario as `meridian-sim run -f` does.
func checkSimExample(t *testing.T, data []byte) {
	sc, err := sim.ParseScenario(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	e, err := sim.New(sc, scheduler.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	res := e.Run(nil)
	if res.Jobs == 0 || res.Completed == 0 {
		t.Fatalf("the scenario ran %d jobs and completed %d", res.Jobs, res.Completed)
	}
}

// checkConfigExample loads a component configuration file as
// `meridian-hub config validate --config FILE` (or meridian-agent's)
// does: strict decoding, every field validated.
func checkConfigExample(t *testing.T, name string, data []byte) {
	var err error
	switch path.Base(name) {
	case "hub.yaml":
		_, err = hubconfig.NewSchema(hubconfig.Options{ValidatePermission: func(p string) error {
			_, err := authz.ParsePermission(p)
			return err
		}}).Parse(name, data)
	case "agent.yaml":
		_, err = agentconfig.NewSchema().Parse(name, data)
	default:
		t.Fatalf("no check for examples/%s: add one", name)
	}
	if err != nil {
		t.Fatalf("config validate: %v", err)
	}
}

// meridianctl runs one command line against the federation's hub, as a
// user would, and returns its combined output and exit code.
func meridianctl(ctx context.Context, f *federation, args ...string) (string, int) {
	var out bytes.Buffer
	// As the demo tells a user to: MERIDIAN_CONFIG names its hub and token.
	env := func(k string) string {
		if k == cli.ConfigEnv {
			return f.cliConfig
		}
		return ""
	}
	code := cli.Main(ctx, args, cli.Env{Stdout: &out, Stderr: &out, Getenv: env})
	return out.String(), code
}

// testWriter sends the demo's progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// The demo's mix submits to teams and sizes work by classGPUs; both must
// agree with the tree file it creates (and that users apply).
func TestDemoTreeMatchesTeamsAndCapacity(t *testing.T) {
	queues, err := demoQueues(classGPUs)
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]*meridianv1.Queue{}
	for _, q := range queues {
		byPath[q.GetPath()] = q
	}
	tenant := queues[0]
	quota := map[string]int64{}
	for _, q := range tenant.GetQuotas() {
		quota[q.GetAcceleratorClass()] = q.GetNominalMilliGpus() / 1000
	}
	if tenant.GetPath() != "acme" || !maps.Equal(quota, classGPUs) {
		t.Fatalf("tenant %s owns %v; the federation has %v", tenant.GetPath(), quota, classGPUs)
	}
	for _, tm := range teams {
		q := byPath[tm.path]
		if q == nil || q.GetWeight() != tm.weight {
			t.Fatalf("team %s (weight %d): the tree file has %v", tm.path, tm.weight, q)
		}
	}
	// A real spoke's class the file does not list is added to the tenant.
	withK8s := maps.Clone(classGPUs)
	withK8s["nvidia-a100-80gb"] = 4
	queues, err = demoQueues(withK8s)
	if err != nil {
		t.Fatal(err)
	}
	last := queues[0].GetQuotas()[len(queues[0].GetQuotas())-1]
	if last.GetAcceleratorClass() != "nvidia-a100-80gb" || last.GetNominalMilliGpus() != 4000 {
		t.Fatalf("the real spoke's class was not added to the tenant: %v", queues[0].GetQuotas())
	}
}

// The demo ends with workloads left waiting, each for the reason its
// printed line promises, so that `explain` has a real answer to show.
func TestDemoLeavesExhibitsWaiting(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := DefaultOptions()
	o.GRPCAddr, o.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	f, err := startFederation(ctx, o, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	left, err := leaveExhibits(ctx, f.c, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, e := range exhibits() {
		if e.want == meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED {
			want[e.w.GetName()] = e.code
		}
	}
	if len(left) != len(want) || len(want) < 3 {
		t.Fatalf("left %d waiting, want %d (at least 3): %+v", len(left), len(want), left)
	}
	codes := map[string]bool{}
	for _, r := range left {
		if r.phase != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED || r.code != want[r.name] {
			t.Errorf("%s is %s %q, want QUEUED %q (%s)", r.name, phaseName(r.phase), r.code, want[r.name], r.why)
		}
		codes[r.code] = true
		ex, err := f.c.wl.ExplainWorkload(ctx, &meridianv1.ExplainWorkloadRequest{Id: r.id})
		if err != nil || ex.GetPendingReasonCode() != want[r.name] || ex.GetPendingReason() == "" {
			t.Errorf("explain %s: code %q reason %q (%v); want code %q", r.name, ex.GetPendingReasonCode(), ex.GetPendingReason(), err, want[r.name])
		}
	}
	if len(codes) != len(left) {
		t.Errorf("the waiting exhibits share reasons %v; each should show a different one", codes)
	}
	// With --forever the hub stays up: the commands name its config and
	// the waiting workloads' ids, to paste as printed.
	var out bytes.Buffer
	forever := o
	forever.Forever = true
	printNextSteps(&out, forever, f, left)
	dashboard := "http://" + f.addrs.HTTP + "/ui/"
	for _, want := range []string{"export MERIDIAN_CONFIG=" + f.cliConfig, "$(cat " + filepath.Join(filepath.Dir(f.cliConfig), "admin.token") + ")", dashboard} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the --forever next steps lack %q:\n%s", want, out.String())
		}
	}
	// The printed dashboard address serves the dashboard (its page needs
	// no token: it asks for one).
	if resp, err := http.Get(dashboard); err != nil {
		t.Errorf("the printed dashboard %s: %v", dashboard, err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(strings.ToLower(string(body)), "<html") {
			t.Errorf("the printed dashboard %s answers %d, not the dashboard page:\n%.300s", dashboard, resp.StatusCode, body)
		}
	}
	// Every HTTP route but /healthz and /readyz needs the token, /metrics too.
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, "curl ") && !strings.Contains(line, "Authorization: Bearer") {
			t.Errorf("a printed curl line has no token; the hub answers 401: %s", line)
		}
	}
	for _, r := range left {
		if !strings.Contains(out.String(), "explain "+r.id) {
			t.Errorf("the next steps do not show how to explain %s:\n%s", r.name, out.String())
		}
	}
	// Without it the hub stops and its state directory goes: the demo
	// shows each waiting workload's reason itself, and prints no path or
	// id of this run, which would fail when pasted.
	out.Reset()
	printNextSteps(&out, o, f, left)
	text := out.String()
	if strings.Contains(text, filepath.Dir(f.cliConfig)) {
		t.Errorf("the next steps of a demo that stops name its state directory, deleted on exit:\n%s", text)
	}
	if !strings.Contains(text, "make demo-forever") {
		t.Errorf("the next steps of a demo that stops do not point at make demo-forever:\n%s", text)
	}
	for _, r := range left {
		if strings.Contains(text, r.id) {
			t.Errorf("the next steps of a demo that stops name workload %s of a hub that is gone:\n%s", r.id, text)
		}
		if r.reason == "" || !strings.Contains(text, r.reason) || !strings.Contains(text, r.code) {
			t.Errorf("the demo does not show why %s waits (%s %q):\n%s", r.name, r.code, r.reason, text)
		}
	}
}
