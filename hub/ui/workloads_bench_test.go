package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/api"
	"github.com/meridian-gpu/meridian/hub/server"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// benchStored is how many workloads the workloads-view benchmark stores:
// the figure for "stays fast".
const benchStored = 100_000

// benchPhases is the phase mix of the stored workloads, per 100: mostly
// finished history, as a hub that keeps a few days of it holds, with some
// running and waiting work. Every phase appears, so grouping by state
// shows eight groups.
var benchPhases = func() []meridianv1.WorkloadPhase {
	var out []meridianv1.WorkloadPhase
	for p, n := range map[meridianv1.WorkloadPhase]int{
		meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED: 55, meridianv1.WorkloadPhase_WORKLOAD_PHASE_FAILED: 10,
		meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED: 8, meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING: 15,
		meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED: 8, meridianv1.WorkloadPhase_WORKLOAD_PHASE_PREEMPTED: 2,
		meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED: 1, meridianv1.WorkloadPhase_WORKLOAD_PHASE_ACCEPTED: 1,
	} {
		for range n {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	rand.New(rand.NewPCG(7, 7)).Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}()

// benchQueues are the leaf queues the stored workloads are spread over,
// with the class each one's work asks for.
var benchQueues = []struct{ path, class string }{
	{"acme/vision", "nvidia-h100-80gb"}, {"acme/nlp/train", "nvidia-h100-80gb"}, {"acme/nlp/serve", "nvidia-a100-40gb"},
	{"acme/research", "nvidia-l40s-48gb"}, {"globex/batch", "nvidia-h100-80gb"}, {"globex/infer", "nvidia-a100-40gb"},
}

// benchID is a workload id as the API makes them (api.WorkloadIDPrefix and
// a ULID: 48 bits of milliseconds, 80 bits of entropy, 26 Crockford base32
// digits), so keys sort by submit time as the hub's do.
func benchID(ms int64, entropy uint64) string {
	const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	v := new(big.Int).Lsh(big.NewInt(ms), 80)
	v.Or(v, new(big.Int).SetUint64(entropy))
	var out [26]byte
	mask := big.NewInt(31)
	for i := 25; i >= 0; i-- {
		out[i] = crockford[new(big.Int).And(v, mask).Int64()]
		v.Rsh(v, 5)
	}
	return api.WorkloadIDPrefix + string(out[:])
}

// benchWorkload is stored workload i, submitted at t; nothing about it
// happens after now.
func benchWorkload(i int, t, now time.Time, r *rand.Rand) *meridianv1.Workload {
	q := benchQueues[i%len(benchQueues)]
	kind := []string{"train", "eval", "sweep", "serve"}[i%4]
	milli, replicas := int32(1000), int32(1+r.IntN(8))
	if kind == "serve" {
		milli, replicas = 250, 1
	}
	w := &meridianv1.Workload{
		Id: benchID(t.UnixMilli(), r.Uint64()), Name: fmt.Sprintf("%s-%s-%06d", strings.ReplaceAll(q.path, "/", "-"), kind, i),
		Queue: q.path, Priority: int32(i%3) * 10, Preemptible: i%2 == 0,
		Labels:      map[string]string{"team": strings.Split(q.path, "/")[1], "kind": kind, "shard": fmt.Sprint(i % 10)},
		PodSets:     []*meridianv1.PodSet{{Name: "main", Replicas: replicas, Resources: &meridianv1.Resources{GpuMilli: milli, CpuMilli: 8000, MemoryMib: 65536, AcceleratorClass: q.class}}},
		Runtime:     &meridianv1.RuntimeTemplate{Kind: &meridianv1.RuntimeTemplate_Container{Container: &meridianv1.ContainerTemplate{Image: "example.com/" + kind + ":1"}}},
		CreateTime:  timestamppb.New(t),
		SubmittedBy: "token:bench",
	}
	st := &meridianv1.WorkloadStatus{Phase: benchPhases[i%len(benchPhases)], UpdateTime: timestamppb.New(t)}
	if st.Phase != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED {
		st.Cluster = []string{"east", "west", "lab"}[i%3]
		st.DispatchTime = timestamppb.New(minTime(t.Add(2*time.Second), now))
		st.Attempts = 1
	} else {
		st.PendingReasonCode, st.PendingReason = "QuotaExhausted", "the queue's nominal quota is in use"
	}
	switch st.Phase {
	case meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING, meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED,
		meridianv1.WorkloadPhase_WORKLOAD_PHASE_FAILED, meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED, meridianv1.WorkloadPhase_WORKLOAD_PHASE_PREEMPTED:
		started := minTime(t.Add(5*time.Second), now)
		st.StartTime = timestamppb.New(started)
		if st.Phase != meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING {
			// It ran up to 90 minutes, and ended by now.
			ran := min(90*time.Minute, now.Sub(started))
			st.EndTime = timestamppb.New(started.Add(time.Duration(r.Float64() * float64(ran))))
		}
	}
	w.Status = st
	return w
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// fillWorkloads creates the queues through the API, writes n workloads
// straight into etcd as the API stores them (in transactions of 100, the
// records encoded as hub/api encodes them), and waits until a search
// through the hub's watch cache counts all of them. It returns how long
// that first search took: the one that decodes every record into the
// search summaries.
func fillWorkloads(b *testing.B, ctx context.Context, h *testHub, n int) time.Duration {
	b.Helper()
	qs := meridianv1.NewQueueServiceClient(h.conn)
	for _, p := range []string{"acme", "acme/nlp", "globex"} {
		if _, err := qs.CreateQueue(ctx, &meridianv1.CreateQueueRequest{Queue: &meridianv1.Queue{Path: p, Weight: 1}}); err != nil {
			b.Fatalf("create queue %s: %v", p, err)
		}
	}
	for _, q := range benchQueues {
		if _, err := qs.CreateQueue(ctx, &meridianv1.CreateQueueRequest{Queue: &meridianv1.Queue{Path: q.path, Weight: 1,
			Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: q.class, NominalMilliGpus: 16000}}}}); err != nil {
			b.Fatalf("create queue %s: %v", q.path, err)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: h.srv.EtcdEndpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	// Submitted over the last three days, oldest first, so ids (and keys)
	// sort by submit time.
	now := time.Now()
	start := now.Add(-72 * time.Hour)
	step := 72 * time.Hour / time.Duration(n)
	const perTxn, writers = 100, 4
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for g := range writers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 42))
			for first := g * perTxn; first < n; first += writers * perTxn {
				ops := make([]clientv3.Op, 0, perTxn)
				for i := first; i < min(first+perTxn, n); i++ {
					w := benchWorkload(i, start.Add(time.Duration(i)*step), now, r)
					raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(w)
					if err != nil {
						errs <- err
						return
					}
					key, err := api.WorkloadKey(w.GetId())
					if err != nil {
						errs <- err
						return
					}
					ops = append(ops, clientv3.OpPut(key, string(raw)))
				}
				if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	wl := meridianv1.NewWorkloadServiceClient(h.conn)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		t0 := time.Now()
		r, err := wl.SearchWorkloads(ctx, &meridianv1.SearchWorkloadsRequest{PageSize: 50, IncludeCounts: true})
		if err == nil && r.GetTotal() == int64(n) {
			return time.Since(t0)
		}
		if time.Now().After(deadline) {
			b.Fatalf("the hub's cache never held %d workloads: total %d, err %v", n, r.GetTotal(), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// viewProbe runs in every document before the dashboard's scripts. A
// MutationObserver notes, on the page's own clock (performance.now(),
// milliseconds from the navigation's start), when the first page of the
// workloads view is in the DOM (50 rows, the state groups with their
// counts, the pager) and when a state filter's rows are; and for each, the
// first frame after it (a requestAnimationFrame, then a task), when the
// rows have been painted.
const viewProbe = `(() => {
  const m = {};
  window.__wlbench = m;
  const rows = () => [...document.querySelectorAll('#workloads tbody tr[data-id]')];
  const groups = () => [...document.querySelectorAll('#groups a')];
  const pageOne = () => ((document.querySelector('#page-info') || {}).textContent || '').startsWith('Page 1');
  const painted = (name) => requestAnimationFrame(() => setTimeout(() => { m[name] = performance.now(); }, 0));
  const check = () => {
    if (m.firstDOM === undefined && rows().length === 50 && groups().length === 8 && pageOne()) {
      m.firstDOM = performance.now();
      painted('firstPaint');
    }
    if (m.filterStart !== undefined && m.filterDOM === undefined && pageOne()) {
      const r = rows(), g = groups();
      if (r.length === 50 && r.every((x) => x.dataset.phase === m.filterPhase) && g.length === 1 && g[0].dataset.group === m.filterPhase) {
        m.filterDOM = performance.now();
        painted('filterPaint');
      }
    }
  };
  new MutationObserver(check).observe(document, { childList: true, subtree: true, characterData: true });
})();`

// viewMarks is what the probe and the page's resource timing say about
// one load of the view.
type viewMarks struct {
	FirstDOM, FirstPaint   float64 // ms from navigation start
	FilterDOM, FilterPaint float64 // ms from the filter change
	Search, FilterSearch   float64 // the search request's fetch, as the browser saw it
	SearchStart            float64 // when the page sent the first search (its start-up cost before it)
	SearchURL, FilterURL   string
}

// BenchmarkWorkloadsViewFirstPage measures the dashboard's workloads view
// with 100,000 stored workloads on a real hub (embedded etcd and NATS,
// authentication on) in headless Chromium. Sub-benchmark browser: each
// iteration is a cold load (the HTTP cache off, a fresh document) of
// #/workloads?group=state, timed on the browser's clock from navigation
// start to the first frame after the first page's 50 rows, the groups'
// counts and the pager are in the DOM; then one state filter (FAILED) from
// the change to the first frame after its rows. Sub-benchmark api: the same
// two REST searches the page sends, timed in Go, the server's share. Each
// reports p50 and p99 (nearest rank) in milliseconds. It saves a
// screenshot of the view (MERIDIAN_UI_SCREENSHOTS=dir keeps it there too).
func BenchmarkWorkloadsViewFirstPage(b *testing.B) {
	bin := chromium(b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	// The scheduling loop at its default period (the browser test's hub
	// cycles ten times as often): the stored QUEUED workloads are pending
	// work it plans for each cycle, as a production hub's would be.
	h := startHub(b, ctx, "ui-bench", func(c *server.Config) { c.SchedulePeriod = 0 })
	t0 := time.Now()
	firstSearch := fillWorkloads(b, ctx, h, benchStored)
	b.Logf("stored %d workloads and the cache holds them in %v; the first search (decodes every record) took %v",
		benchStored, time.Since(t0).Round(time.Millisecond), firstSearch.Round(time.Millisecond))

	bctx := newBrowser(b, ctx, bin)
	step := func(b testing.TB, what string, actions ...chromedp.Action[chromedp.Void]) {
		b.Helper()
		sctx, scancel := context.WithTimeout(bctx, 30*time.Second)
		defer scancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			body, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`(document.querySelector('main') || document.body).innerText`))
			b.Fatalf("%s: %v\npage: %s", what, err, lastLines(body, 20))
		}
	}
	wait := func(b testing.TB, what, js string) {
		b.Helper()
		sctx, scancel := context.WithTimeout(bctx, 30*time.Second)
		defer scancel()
		if _, err := chromedp.Run(sctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
			body, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`(document.querySelector('main') || document.body).innerText`))
			state, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`JSON.stringify({marks: window.__wlbench, requests: performance.getEntriesByType('resource').map((e) => [e.name, Math.round(e.startTime), Math.round(e.responseEnd)])})`))
			b.Fatalf("%s: %v\npage: %s\nstate: %s", what, err, lastLines(body, 8), state)
		}
	}
	const firstShown = `!!window.__wlbench && window.__wlbench.firstPaint !== undefined`
	if _, err := chromedp.Call(bctx, network.Enable, network.EnableParams{}); err != nil {
		b.Fatal(err)
	}
	if _, err := chromedp.Call(bctx, network.SetCacheDisabled, network.SetCacheDisabledParams{CacheDisabled: true}); err != nil {
		b.Fatal(err)
	}
	if _, err := chromedp.Call(bctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: viewProbe}); err != nil {
		b.Fatal(err)
	}
	// Sign in with the admin token; the token stays in the tab's session
	// storage across the loads below.
	step(b, "open the login page", chromedp.Navigate(h.base+"/ui/"), chromedp.WaitVisible(chromedp.ID("token")))
	step(b, "sign in", chromedp.SendKeys(chromedp.ID("token"), h.adminToken), chromedp.Click(chromedp.CSS("#login-form button[type=submit]")))
	wait(b, "signed in", `!document.getElementById('nav').hidden`)

	const filterPhase = "FAILED"
	load := func(b testing.TB) viewMarks {
		b.Helper()
		step(b, "blank", chromedp.Navigate("about:blank"))
		step(b, "load the view", chromedp.Navigate(h.base+"/ui/#/workloads?group=state"))
		wait(b, "the first page", firstShown)
		wait(b, "filter by state", fmt.Sprintf(`(() => {
  const m = window.__wlbench, s = document.querySelector('#f-phase');
  m.filterPhase = %q;
  m.filterStart = performance.now();
  s.value = %[1]q;
  s.dispatchEvent(new Event('change'));
  return true;
})()`, filterPhase))
		wait(b, "the filtered page", `window.__wlbench.filterPaint !== undefined`)
		raw, err := chromedp.Run(bctx, chromedp.Evaluate[string](`(() => {
  const m = window.__wlbench;
  const s = performance.getEntriesByType('resource').filter((e) => e.name.includes('/v1/workloads:search'));
  const f = s[s.length - 1];
  return JSON.stringify({
    FirstDOM: m.firstDOM, FirstPaint: m.firstPaint,
    FilterDOM: m.filterDOM - m.filterStart, FilterPaint: m.filterPaint - m.filterStart,
    Search: s[0].responseEnd - s[0].startTime, SearchStart: s[0].startTime, SearchURL: s[0].name,
    FilterSearch: f.responseEnd - f.startTime, FilterURL: f.name,
  });
})()`))
		if err != nil {
			b.Fatal(err)
		}
		var vm viewMarks
		if err := json.Unmarshal([]byte(raw), &vm); err != nil {
			b.Fatalf("%v: %s", err, raw)
		}
		return vm
	}

	// One load before timing: the first view of the page, and a check that
	// it shows all the stored workloads in its groups. Its timeline goes to
	// the log: where the milliseconds before the first search go.
	load(b)
	timeline, err := chromedp.Run(bctx, chromedp.Evaluate[string](`(() => {
  const n = performance.getEntriesByType('navigation')[0];
  const out = ['document ' + Math.round(n.responseEnd), 'DOMContentLoaded ' + Math.round(n.domContentLoadedEventEnd)];
  for (const e of performance.getEntriesByType('resource')) out.push(e.name.replace(location.origin, '') + ' ' + Math.round(e.startTime) + '-' + Math.round(e.responseEnd));
  return out.join('; ');
})()`))
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("timeline of one load and filter (ms from navigation start): %s", timeline)
	step(b, "back to the first page", chromedp.Navigate("about:blank"), chromedp.Navigate(h.base+"/ui/#/workloads?group=state"))
	wait(b, "the first page again", firstShown)
	counts, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#groups a b')].map((x) => x.textContent)`))
	if err != nil {
		b.Fatal(err)
	}
	var sum int64
	for _, c := range counts {
		var v int64
		fmt.Sscan(strings.Map(func(r rune) rune {
			if r >= '0' && r <= '9' {
				return r
			}
			return -1
		}, c), &v)
		sum += v
	}
	if sum != benchStored {
		b.Fatalf("the state groups count %d workloads (%v), want %d", sum, counts, benchStored)
	}
	shots := []string{b.ArtifactDir(), os.Getenv("MERIDIAN_UI_SCREENSHOTS")}
	step(b, "screenshot", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		buf, err := chromedp.FullScreenshot(100)(ctx, tg)
		if err != nil {
			return err
		}
		for _, d := range shots {
			if d != "" {
				if err := os.WriteFile(filepath.Join(d, "workloads-100k.png"), buf, 0o644); err != nil {
					return err
				}
			}
		}
		return nil
	}))
	b.Logf("screenshot: %s", filepath.Join(shots[0], "workloads-100k.png"))

	// The page's two searches, which the api sub-benchmark repeats over
	// REST in Go; the browser sub-benchmark checks that the page sends
	// these.
	searchQuery := url.Values{"pageSize": {"50"}, "includeCounts": {"true"}}
	filterQuery := url.Values{"pageSize": {"50"}, "includeCounts": {"true"}, "phase": {filterPhase}}

	b.Run("browser", func(b *testing.B) {
		var first, firstDOM, filter, search, filterSearch, boot, render []float64
		for b.Loop() {
			vm := load(b)
			first, firstDOM, filter = append(first, vm.FirstPaint), append(firstDOM, vm.FirstDOM), append(filter, vm.FilterPaint)
			search, filterSearch, boot = append(search, vm.Search), append(filterSearch, vm.FilterSearch), append(boot, vm.SearchStart)
			render = append(render, vm.FirstPaint-(vm.SearchStart+vm.Search))
			if got := queryOf(b, vm.SearchURL); !maps.EqualFunc(got, searchQuery, slices.Equal) {
				b.Fatalf("the page searched with %v, the api sub-benchmark with %v", got, searchQuery)
			}
			if got := queryOf(b, vm.FilterURL); !maps.EqualFunc(got, filterQuery, slices.Equal) {
				b.Fatalf("the filtered page searched with %v, the api sub-benchmark with %v", got, filterQuery)
			}
		}
		b.ReportMetric(0, "ns/op")
		reportPercentiles(b, "first-page", first)
		reportPercentiles(b, "first-page-dom", firstDOM)
		reportPercentiles(b, "first-search", search)
		reportPercentiles(b, "boot", boot)
		reportPercentiles(b, "render", render)
		reportPercentiles(b, "filter", filter)
		reportPercentiles(b, "filter-search", filterSearch)
	})

	b.Run("api", func(b *testing.B) {
		var first, filter []float64
		for b.Loop() {
			first = append(first, restSearch(b, h, searchQuery, benchStored))
			filter = append(filter, restSearch(b, h, filterQuery, 0))
		}
		b.ReportMetric(0, "ns/op")
		reportPercentiles(b, "first-page", first)
		reportPercentiles(b, "filter", filter)
	})
}

func queryOf(b testing.TB, u string) url.Values {
	b.Helper()
	p, err := url.Parse(u)
	if err != nil {
		b.Fatal(err)
	}
	return p.Query()
}

// restSearch sends GET /v1/workloads:search as the page does and returns
// how long the answer took, in milliseconds, body read and decoded. With
// wantTotal it checks the total.
func restSearch(b *testing.B, h *testHub, q url.Values, wantTotal int64) float64 {
	b.Helper()
	req, _ := http.NewRequest(http.MethodGet, h.base+"/v1/workloads:search?"+q.Encode(), nil)
	req.Header.Set("Authorization", "Bearer "+h.adminToken)
	req.Header.Set("Accept", "application/json")
	t0 := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Total     string            `json:"total"`
		Workloads []json.RawMessage `json:"workloads"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("search %v: %d %v", q, resp.StatusCode, err)
	}
	d := time.Since(t0)
	if len(out.Workloads) != 50 || (wantTotal > 0 && out.Total != fmt.Sprint(wantTotal)) {
		b.Fatalf("search %v: %d workloads, total %s (want 50, %d)", q, len(out.Workloads), out.Total, wantTotal)
	}
	return float64(d.Microseconds()) / 1000
}

// reportPercentiles reports p50 and p99 of ms by nearest rank.
func reportPercentiles(b *testing.B, name string, ms []float64) {
	b.Helper()
	if len(ms) == 0 {
		return
	}
	s := slices.Clone(ms)
	slices.Sort(s)
	rank := func(p float64) float64 {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	b.ReportMetric(rank(0.50), name+"-p50-ms")
	b.ReportMetric(rank(0.99), name+"-p99-ms")
}
