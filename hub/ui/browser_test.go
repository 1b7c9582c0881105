package ui_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meridian-gpu/meridian/connectors/simcluster"
	"github.com/meridian-gpu/meridian/hub/server"
	"github.com/meridian-gpu/meridian/internal/localrun"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// chromium finds a Chromium, installing Debian's when running as root. It
// skips the test loudly when none can be had, or fails it when
// MERIDIAN_REQUIRE_BROWSER=1 (as CI sets).
func chromium(t testing.TB) string {
	t.Helper()
	find := func() string {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
			if p, err := exec.LookPath(name); err == nil {
				return p
			}
		}
		return ""
	}
	if p := find(); p != "" {
		return p
	}
	why := "no chromium on PATH and not root, so it cannot be installed (apt-get install chromium)"
	if os.Geteuid() == 0 {
		t.Log("browser test: installing chromium with apt-get (about a minute)")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "apt-get", "install", "-y", "-q", "chromium")
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if p := find(); err == nil && p != "" {
			return p
		}
		why = fmt.Sprintf("apt-get install chromium failed: %v: %s", err, lastLines(string(out), 5))
	}
	if os.Getenv("MERIDIAN_REQUIRE_BROWSER") == "1" {
		t.Fatalf("MERIDIAN_REQUIRE_BROWSER=1 but %s", why)
	}
	t.Skipf("SKIPPED (LOUDLY): the dashboard's browser test needs Chromium: %s. Set MERIDIAN_REQUIRE_BROWSER=1 to make this a failure.", why)
	return ""
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// fixture is a hub with authentication on, three simulated clusters behind
// real agents, a queue tree, workloads in several phases, and a viewer
// token that may only view acme.
type fixture struct {
	base        string // http://host:port
	adminToken  string
	viewerToken string
	wl          meridianv1.WorkloadServiceClient
	q           meridianv1.QueueServiceClient
	queued      []string // ids of workloads left waiting (over quota)
}

// testHub is a real hub on embedded etcd and NATS with authentication on,
// as the browser test and the benchmark run it.
type testHub struct {
	srv        *server.Server
	base       string // http://host:port
	adminToken string
	conn       *grpc.ClientConn // as the admin
	ctx        context.Context  // ends when the hub stops
}

// startHub starts one; tune, when given, changes its configuration first.
func startHub(tb testing.TB, ctx context.Context, hubID string, tune ...func(*server.Config)) *testHub {
	tb.Helper()
	dir := tb.TempDir()
	tokenFile := filepath.Join(dir, "admin.token")
	cfg := server.Config{
		DataDir: filepath.Join(dir, "hub"), HubID: hubID, Version: "test", UnsafeNoFsync: true,
		LeaderTTL: time.Second, SchedulePeriod: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		Security: server.Security{Mode: server.AuthOn, AdminTokenFile: tokenFile},
	}
	for _, f := range tune {
		f(&cfg)
	}
	srv, err := server.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	hctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(hctx) }()
	tb.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
		}
		_ = srv.Close()
	})
	h := &testHub{srv: srv, base: "http://" + srv.Addrs().HTTP, ctx: hctx}
	if err := localrun.WaitReady(ctx, h.base+"/readyz", 30*time.Second); err != nil {
		tb.Fatal(err)
	}
	b, err := os.ReadFile(tokenFile)
	if err != nil {
		tb.Fatal(err)
	}
	h.adminToken = strings.TrimSpace(string(b))
	h.conn, err = grpc.NewClient(srv.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()), localrun.Bearer(h.adminToken))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { h.conn.Close() })
	return h
}

// newBrowser starts headless Chromium for the length of the test and
// returns its context.
func newBrowser(tb testing.TB, ctx context.Context, bin string) context.Context {
	tb.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(tb.TempDir()), chromedp.WindowSize(1440, 1000),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	tb.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	tb.Cleanup(bcancel)
	// Start the browser on bctx itself: a browser started by the first
	// action of a step's shorter context would end with that step.
	if err := chromedp.Do(bctx); err != nil {
		tb.Fatalf("start chromium: %v", err)
	}
	return bctx
}

func startFixture(t *testing.T, ctx context.Context) *fixture {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	h := startHub(t, ctx, "ui-test")
	srv, hctx, conn := h.srv, h.ctx, h.conn
	f := &fixture{base: h.base, adminToken: h.adminToken}
	f.wl, f.q = meridianv1.NewWorkloadServiceClient(conn), meridianv1.NewQueueServiceClient(conn)
	cl := meridianv1.NewClusterServiceClient(conn)
	admin := meridianv1.NewAdminServiceClient(conn)

	for _, c := range []struct{ id, example string }{{"east", "h100-nvlink"}, {"west", "a100-fractional"}, {"lab", "mixed-l40s-slurm"}} {
		cfg, err := simcluster.Example(c.example)
		if err != nil {
			t.Fatal(err)
		}
		sim, err := simcluster.New(cfg, simcluster.Options{Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		stopAgent, err := localrun.Agent(hctx, hctx, srv.NATSURL(), "ui-agent-"+c.id, agent.Config{
			ClusterID: c.id, Connector: sim, Logger: log, Version: "test",
			HeartbeatInterval: 500 * time.Millisecond, AdvertiseInterval: time.Second, ChangeDelay: 20 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stopAgent(); sim.Close() })
	}
	waitFor(t, ctx, "three clusters", func() bool {
		r, err := cl.ListClusters(ctx, &meridianv1.ListClustersRequest{})
		return err == nil && len(r.GetClusters()) == 3 && len(r.GetClusters()[0].GetCapacity()) > 0
	})

	// Viewer: a token with no global permission, allowed to view acme.
	tok, err := admin.CreateAPIToken(ctx, &meridianv1.CreateAPITokenRequest{Token: &meridianv1.APIToken{Description: "dashboard viewer", User: "viewer"}})
	if err != nil {
		t.Fatal(err)
	}
	f.viewerToken = tok.GetSecret()
	i64 := func(v int64) *int64 { return &v }
	queues := []*meridianv1.Queue{
		{Path: "acme", Weight: 1, Access: []*meridianv1.AccessEntry{{Subject: "token:" + tok.GetToken().GetId(), Verbs: []string{"view"}}},
			Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: "nvidia-h100-80gb", NominalMilliGpus: 48000}, {AcceleratorClass: "nvidia-a100-40gb", NominalMilliGpus: 16000}}},
		{Path: "acme/vision", Weight: 2, Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: "nvidia-h100-80gb", NominalMilliGpus: 16000, BorrowLimitMilli: i64(16000)}}},
		{Path: "acme/nlp", Weight: 1, Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: "nvidia-h100-80gb", NominalMilliGpus: 24000, BorrowLimitMilli: i64(0)},
			{AcceleratorClass: "nvidia-a100-40gb", NominalMilliGpus: 8000}}},
		{Path: "acme/nlp/train", Weight: 2, Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: "nvidia-h100-80gb", NominalMilliGpus: 16000, BorrowLimitMilli: i64(0)}}},
		{Path: "acme/nlp/serve", Weight: 1, Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: "nvidia-a100-40gb", NominalMilliGpus: 4000}}},
		{Path: "globex", Weight: 1, Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: "nvidia-h100-80gb", NominalMilliGpus: 8000}}},
	}
	for _, q := range queues {
		if _, err := f.q.CreateQueue(ctx, &meridianv1.CreateQueueRequest{Queue: q}); err != nil {
			t.Fatalf("create queue %s: %v", q.Path, err)
		}
	}
	submit := func(name, queue, class string, milli int64, replicas int32, topo meridianv1.Topology) string {
		r, err := f.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: &meridianv1.Workload{
			Name: name, Queue: queue, Priority: int32(len(name) % 3 * 10), Preemptible: true,
			Labels: map[string]string{simcluster.LabelDuration: "1h", "team": strings.Split(queue+"/", "/")[1]},
			PodSets: []*meridianv1.PodSet{{Name: "main", Replicas: replicas, Topology: topo,
				Resources: &meridianv1.Resources{GpuMilli: int32(milli), AcceleratorClass: class}}},
			Runtime: &meridianv1.RuntimeTemplate{Kind: &meridianv1.RuntimeTemplate_Container{Container: &meridianv1.ContainerTemplate{Image: "example.com/train:1"}}},
		}})
		if err != nil {
			t.Fatalf("submit %s: %v", name, err)
		}
		return r.GetWorkload().GetId()
	}
	for i := range 4 {
		submit(fmt.Sprintf("vision-train-%d", i), "acme/vision", "nvidia-h100-80gb", 1000, 8, meridianv1.Topology_TOPOLOGY_NVLINK_DOMAIN)
	}
	for i := range 3 {
		submit(fmt.Sprintf("nlp-pretrain-%d", i), "acme/nlp/train", "nvidia-h100-80gb", 1000, 4, meridianv1.Topology_TOPOLOGY_RACK)
	}
	for i := range 6 {
		submit(fmt.Sprintf("serve-%d", i), "acme/nlp/serve", "nvidia-a100-40gb", 250, 1, meridianv1.Topology_TOPOLOGY_UNSPECIFIED)
	}
	submit("globex-batch", "globex", "nvidia-h100-80gb", 1000, 2, meridianv1.Topology_TOPOLOGY_UNSPECIFIED)
	// Over acme/nlp's quota (no borrowing): these wait with a reason.
	for i := range 3 {
		f.queued = append(f.queued, submit(fmt.Sprintf("nlp-sweep-%d", i), "acme/nlp/train", "nvidia-h100-80gb", 1000, 8, meridianv1.Topology_TOPOLOGY_UNSPECIFIED))
	}
	// Enough small ones for more than one page of 50.
	for i := range 45 {
		submit(fmt.Sprintf("vision-eval-%02d", i), "acme/vision", "nvidia-l40s-48gb", 1000, 1, meridianv1.Topology_TOPOLOGY_UNSPECIFIED)
	}
	waitFor(t, ctx, "workloads running", func() bool {
		r, err := f.wl.ListWorkloads(ctx, &meridianv1.ListWorkloadsRequest{Phase: []meridianv1.WorkloadPhase{meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING}, PageSize: 1000})
		return err == nil && len(r.GetWorkloads()) >= 10
	})
	waitFor(t, ctx, "a pending reason", func() bool {
		w, err := f.wl.GetWorkload(ctx, &meridianv1.GetWorkloadRequest{Id: f.queued[0]})
		return err == nil && w.GetStatus().GetPendingReasonCode() != "" && w.GetStatus().GetPendingReasonCode() != "WaitingForScheduler"
	})
	return f
}

func waitFor(t *testing.T, ctx context.Context, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestDashboardInBrowser drives the dashboard in headless Chromium against
// a real hub: token sign-in, the fleet, the queue bars, the workloads table
// (filter, group, page), a workload's detail with its explanation, a live
// update, and a viewer whose cancel the hub refuses. It saves a screenshot
// of each view (MERIDIAN_UI_SCREENSHOTS=dir keeps them there too).
func TestDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a hub and a browser")
	}
	bin := chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := startFixture(t, ctx)

	bctx := newBrowser(t, ctx, bin)

	shots := t.TempDir()
	keep := os.Getenv("MERIDIAN_UI_SCREENSHOTS")
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			buf, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return err
			}
			for _, d := range []string{shots, keep} {
				if d != "" {
					if err := os.WriteFile(filepath.Join(d, name+".png"), buf, 0o644); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	run := func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, scancel := context.WithTimeout(bctx, 30*time.Second)
		defer scancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			body, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('main').innerText`))
			t.Fatalf("%s: %v\npage: %s", step, err, lastLines(body, 20))
		}
	}
	eval := func(js string) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return v
	}
	count := func(sel string) int {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
		if err != nil {
			t.Fatalf("count %s: %v", sel, err)
		}
		return v
	}
	text := func(sel string) string {
		t.Helper()
		return eval(fmt.Sprintf("(document.querySelector(%q) || {}).textContent || ''", sel))
	}
	waitJS := func(step, js string) {
		t.Helper()
		sctx, scancel := context.WithTimeout(bctx, 30*time.Second)
		defer scancel()
		if _, err := chromedp.Run(sctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
			body, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('main').innerText`))
			t.Fatalf("%s: %v\npage: %s", step, err, lastLines(body, 30))
		}
	}

	// Sign in with the admin token.
	run("open the login page", chromedp.Navigate(f.base+"/ui/"), chromedp.WaitVisible(chromedp.ID("token")))
	run("login screenshot", shot("login"))
	run("sign in", chromedp.SendKeys(chromedp.ID("token"), f.adminToken), chromedp.Click(chromedp.CSS("#login-form button[type=submit]")))

	// Fleet.
	waitJS("fleet", `document.querySelectorAll('section.cluster').length === 3 && document.querySelectorAll('.domain').length > 0`)
	if s := text(`section.cluster[data-cluster="east"] .badge`); s != "READY" {
		t.Errorf("east: state %q", s)
	}
	if n := count(`section.cluster[data-cluster="east"] .domain[data-kind="nvlink"]`); n != 2 {
		t.Errorf("east: %d NVLink domains drawn, want 2", n)
	}
	if !strings.Contains(text(`section.cluster[data-cluster="west"]`), "MPS") {
		t.Errorf("west: fractional modes not shown")
	}
	if !strings.Contains(text("#who"), "admin") && !strings.Contains(text("#who"), "token") {
		t.Logf("who: %q", text("#who"))
	}
	run("fleet screenshot", shot("fleet"))

	// Queues: bars per class.
	run("queues", chromedp.Navigate(f.base+"/ui/#/queues"))
	waitJS("queue bars", `document.querySelectorAll('#queues tr[data-queue="acme/vision"] .bar .used').length > 0`)
	if n := count(`#queues tr[data-queue]`); n < 5 {
		t.Errorf("%d queue rows", n)
	}
	waitJS("usage drawn", `[...document.querySelectorAll('#queues .bar .used')].some(e => parseFloat(e.style.width) > 0)`)
	run("queues screenshot", shot("queues"))

	// Workloads: the table, grouping, filtering, paging.
	run("workloads", chromedp.Navigate(f.base+"/ui/#/workloads?group=state"))
	waitJS("table", `document.querySelectorAll('#workloads tbody tr[data-id]').length === 50 && document.querySelectorAll('#groups a').length > 1`)
	waitJS("group counts", `[...document.querySelectorAll('#groups a')].some(a => a.dataset.group === 'RUNNING')`)
	run("workloads screenshot", shot("workloads"))
	run("page 2", chromedp.Click(chromedp.ID("next")))
	waitJS("page 2 shown", `(document.querySelector('#page-info')||{}).textContent.startsWith('Page 2')`)
	run("filter QUEUED", chromedp.Navigate(f.base+"/ui/#/workloads?phase=QUEUED&queue=acme/nlp"))
	waitJS("only queued nlp", `(() => { const r = [...document.querySelectorAll('#workloads tbody tr[data-id]')]; return r.length >= 3 && r.every(x => x.dataset.phase === 'QUEUED' && x.firstChild.textContent.startsWith('acme/nlp/')); })()`)
	run("free text", chromedp.Navigate(f.base+"/ui/#/workloads?q=globex-bat"))
	waitJS("text filter", `(() => { const r = document.querySelectorAll('#workloads tbody tr[data-id]'); return r.length === 1 && r[0].textContent.includes('globex-batch'); })()`)
	run("group by queue", chromedp.Navigate(f.base+"/ui/#/workloads?group=queue"))
	waitJS("queue groups", `[...document.querySelectorAll('#groups a')].map(a => a.dataset.group).join(',') === 'acme/nlp/serve,acme/nlp/train,acme/vision,globex'`)

	// Away and back, more times than a browser opens connections to one
	// host (six): a page in the back/forward cache must not keep its watch
	// stream open, or every later request would wait for a connection.
	for i := range 8 {
		run(fmt.Sprintf("away and back %d", i), chromedp.Navigate("about:blank"), chromedp.Navigate(f.base+"/ui/#/workloads"))
		waitJS(fmt.Sprintf("table after coming back %d", i), `document.querySelectorAll('#workloads tbody tr[data-id]').length === 50`)
	}

	// Detail of a waiting workload: its explanation, then a live update
	// when it is cancelled elsewhere.
	id := f.queued[0]
	run("detail", chromedp.Navigate(f.base+"/ui/#/workloads/"+id))
	waitJS("explain", `document.querySelector('#pending-reason') && document.querySelectorAll('#explain-clusters tr[data-cluster]').length === 3`)
	waitJS("cancel offered to admin", `!!document.querySelector('#cancel')`)
	run("detail screenshot", shot("detail"))
	if _, err := f.wl.CancelWorkload(ctx, &meridianv1.CancelWorkloadRequest{Id: id, Reason: "cancelled by the browser test"}); err != nil {
		t.Fatal(err)
	}
	waitJS("live update", `document.querySelector('#phase').textContent === 'CANCELLED' && document.querySelectorAll('#timeline li.watch').length > 0`)

	// A viewer sees acme only, and the hub refuses its cancel.
	run("sign out", chromedp.Click(chromedp.ID("signout")), chromedp.WaitVisible(chromedp.ID("token")))
	run("viewer signs in", chromedp.SendKeys(chromedp.ID("token"), f.viewerToken), chromedp.Click(chromedp.CSS("#login-form button[type=submit]")))
	waitJS("viewer fleet", `document.querySelectorAll('section.cluster').length === 3`)
	run("viewer workloads", chromedp.Navigate(f.base+"/ui/#/workloads?group=queue"))
	waitJS("viewer table", `document.querySelectorAll('#workloads tbody tr[data-id]').length > 0`)
	if n := count(`#groups a[data-group="globex"]`); n != 0 {
		t.Errorf("the viewer sees globex's workloads")
	}
	victim := f.queued[1]
	run("viewer detail", chromedp.Navigate(f.base+"/ui/#/workloads/"+victim))
	waitJS("cancel hidden", `!!document.querySelector('#cancel-hidden') && !document.querySelector('#cancel')`)
	run("ask anyway", chromedp.Click(chromedp.ID("cancel-anyway")), chromedp.WaitVisible(chromedp.ID("cancel")), chromedp.Click(chromedp.ID("cancel")))
	waitJS("refusal shown", `!!document.querySelector('#cancel-refused')`)
	if s := text("#cancel-refused"); !strings.Contains(s, "403") && !strings.Contains(s, "404") {
		t.Errorf("refusal: %q", s)
	}
	run("refusal screenshot", shot("viewer-refused"))
	w, err := f.wl.GetWorkload(ctx, &meridianv1.GetWorkloadRequest{Id: victim})
	if err != nil || w.GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED {
		t.Errorf("after the viewer's refused cancel: %v %v", w.GetStatus().GetPhase(), err)
	}
	t.Logf("screenshots in %s", shots)
}
