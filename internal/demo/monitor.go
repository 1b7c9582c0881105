package demo

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// monitor polls the hub's API (the same API users and meridianctl use) and
// draws the live table.
type monitor struct {
	c         client
	httpAddr  string
	token     string // the admin API token, for /metrics
	o         Options
	out, err  io.Writer
	start     time.Time
	submitted atomic.Int64

	reasons []string // distinct pending reasons, in the order first seen
	seen    map[string]bool
}

func newMonitor(c client, httpAddr string, o Options, out, err io.Writer, start time.Time) *monitor {
	return &monitor{c: c, httpAddr: httpAddr, o: o, out: out, err: err, start: start,
		seen: map[string]bool{}}
}

// view is one poll of the hub.
type view struct {
	workloads []*meridianv1.Workload
	clusters  []*meridianv1.Cluster
	queues    map[string]*meridianv1.Queue
}

func (m *monitor) poll(ctx context.Context) (*view, error) {
	v := &view{queues: map[string]*meridianv1.Queue{}}
	token := ""
	for {
		resp, err := m.c.wl.ListWorkloads(ctx, &meridianv1.ListWorkloadsRequest{PageSize: 500, PageToken: token})
		if err != nil {
			return nil, fmt.Errorf("list workloads: %w", err)
		}
		v.workloads = append(v.workloads, resp.GetWorkloads()...)
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	cl, err := m.c.cl.ListClusters(ctx, &meridianv1.ListClustersRequest{})
	if err != nil {
		return nil, fmt.Errorf("list clusters: %w", err)
	}
	v.clusters = cl.GetClusters()
	qs, err := m.c.q.ListQueues(ctx, &meridianv1.ListQueuesRequest{PageSize: 100})
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	for _, q := range qs.GetQueues() {
		v.queues[q.GetPath()] = q
	}
	return v, nil
}

// collectReasons remembers each distinct pending reason, in the order first seen.
func (m *monitor) collectReasons(v *view) {
	for _, w := range v.workloads {
		r := w.GetStatus().GetPendingReason()
		if w.GetStatus().GetPhase() == meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED && r != "" && !m.seen[r] && !strings.HasPrefix(r, "waiting for the scheduler") {
			m.seen[r] = true
			m.reasons = append(m.reasons, r)
		}
	}
}

func usageMilli(q *meridianv1.Queue) int64 {
	var s int64
	for _, c := range q.GetStatus().GetClasses() {
		s += c.GetUsageMilli()
	}
	return s
}

// run polls until every workload is finished or the deadline passes.
func (m *monitor) run(ctx context.Context, mix []*item) (*Summary, error) {
	tick := time.NewTicker(m.o.Refresh)
	defer tick.Stop()
	deadline := m.start.Add(m.o.Deadline)
	lastLine := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		now := time.Now()
		v, err := m.poll(ctx)
		if err != nil {
			return nil, err
		}
		m.collectReasons(v)
		done := 0
		for _, w := range v.workloads {
			if isDone(w.GetStatus().GetPhase()) {
				done++
			}
		}
		finished := int(m.submitted.Load()) == len(mix) && done == len(mix)
		if m.o.Live {
			m.draw(v, now)
		} else if now.Sub(lastLine) >= 2*time.Second || finished {
			lastLine = now
			fmt.Fprintf(m.err, "meridian demo: %5.1fs  %s\n", now.Sub(m.start).Seconds(), phaseLine(v, int(m.submitted.Load()), len(mix)))
		}
		if finished || now.After(deadline) {
			return m.summarize(ctx, v, mix, now, !finished), nil
		}
	}
}

func phaseCounts(v *view) map[meridianv1.WorkloadPhase]int {
	n := map[meridianv1.WorkloadPhase]int{}
	for _, w := range v.workloads {
		n[w.GetStatus().GetPhase()]++
	}
	return n
}

func phaseLine(v *view, submitted, total int) string {
	n := phaseCounts(v)
	return fmt.Sprintf("submitted %d/%d  queued %d  dispatched %d  running %d  succeeded %d  failed %d  cancelled %d",
		submitted, total,
		n[meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED],
		n[meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED]+n[meridianv1.WorkloadPhase_WORKLOAD_PHASE_ACCEPTED],
		n[meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING],
		n[meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED],
		n[meridianv1.WorkloadPhase_WORKLOAD_PHASE_FAILED],
		n[meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED])
}

// draw redraws the live table in place.
func (m *monitor) draw(v *view, now time.Time) {
	var b strings.Builder
	b.WriteString("\033[H\033[2J")
	fmt.Fprintf(&b, "Meridian demo  %5.1fs   %s\n\n", now.Sub(m.start).Seconds(), phaseLine(v, int(m.submitted.Load()), len(v.workloads)))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tSTATE\tGPUS BUSY\tRUNNING\tFRACTIONS")
	running := map[string]int{}
	for _, w := range v.workloads {
		if w.GetStatus().GetPhase() == meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING {
			running[w.GetStatus().GetCluster()]++
		}
	}
	for _, c := range v.clusters {
		var total, free int64
		for _, cap := range c.GetCapacity() {
			total += cap.GetTotalMilli()
			free += cap.GetFreeMilli()
		}
		pct := 0.0
		if total > 0 {
			pct = 100 * float64(total-free) / float64(total)
		}
		fmt.Fprintf(tw, "%s\t%s\t%5.1f / %d (%3.0f%%)\t%d\t%s\n", c.GetId(), strings.TrimPrefix(c.GetState().String(), "CLUSTER_STATE_"),
			float64(total-free)/1000, total/1000, pct, running[c.GetId()], modes(c))
	}
	tw.Flush()
	b.WriteString("\n")
	m.teamTable(&b, v)
	if len(m.reasons) > 0 {
		b.WriteString("\nlatest pending reason: ")
		b.WriteString(m.reasons[len(m.reasons)-1])
		b.WriteString("\n")
	}
	fmt.Fprint(m.out, b.String())
}

func modes(c *meridianv1.Cluster) string {
	var out []string
	for _, f := range c.GetFractionalModes() {
		out = append(out, strings.ToLower(strings.TrimPrefix(f.String(), "FRACTIONAL_MODE_")))
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ",")
}

func (m *monitor) teamTable(w io.Writer, v *view) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TEAM\tWEIGHT\tGPUS NOW\tQUEUED\tFINISHED\tWAIT P50\tWAIT P90\tALL DONE AT")
	for _, t := range teams {
		st := teamStats(v, t.path, m.start)
		var q *meridianv1.Queue
		if v != nil {
			q = v.queues[t.path]
		}
		done := "-"
		if st.queued == 0 && st.active == 0 && st.finished > 0 {
			done = fmt.Sprintf("%.1fs", st.lastEnd.Seconds())
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%d\t%d\t%s\t%s\t%s\n", t.path, t.weight, float64(usageMilli(q))/1000,
			st.queued, st.finished, secs(st.waitP50), secs(st.waitP90), done)
	}
	tw.Flush()
}

// teamStat summarises one team's workloads: how long they waited from
// submission to their (last) dispatch, and when the team's last one ended.
type teamStat struct {
	queued, active, finished int
	waitP50, waitP90         time.Duration
	lastEnd                  time.Duration
}

func teamStats(v *view, team string, start time.Time) teamStat {
	var st teamStat
	if v == nil {
		return st
	}
	var waits []time.Duration
	for _, w := range v.workloads {
		if w.GetQueue() != team {
			continue
		}
		s := w.GetStatus()
		switch {
		case s.GetPhase() == meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED:
			st.queued++
		case isDone(s.GetPhase()):
			st.finished++
			if e := s.GetEndTime(); e != nil && e.AsTime().Sub(start) > st.lastEnd {
				st.lastEnd = e.AsTime().Sub(start)
			}
		default:
			st.active++
		}
		if d := s.GetDispatchTime(); d != nil && w.GetCreateTime() != nil {
			waits = append(waits, d.AsTime().Sub(w.GetCreateTime().AsTime()))
		}
	}
	sort.Slice(waits, func(a, b int) bool { return waits[a] < waits[b] })
	if n := len(waits); n > 0 {
		st.waitP50, st.waitP90 = waits[n/2], waits[n*9/10]
	}
	return st
}

func secs(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fs", d.Seconds())
}

// preemptions reads the hub's own counter from /metrics.
func (m *monitor) preemptions(ctx context.Context) int {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.httpAddr+"/metrics", nil)
	if m.token != "" {
		req.Header.Set("Authorization", "Bearer "+m.token) // /metrics needs authentication
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	// The counter has a series per rule (reason="priority", "reclaim"):
	// the demo reports their sum.
	sc := bufio.NewScanner(resp.Body)
	total, found := 0.0, false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "meridian_preemptions_total ") && !strings.HasPrefix(line, "meridian_preemptions_total{") {
			continue
		}
		if i := strings.LastIndexByte(line, ' '); i > 0 {
			if f, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
				total, found = total+f, true
			}
		}
	}
	if !found {
		return -1
	}
	return int(total)
}

// Summary is what the demo reports at the end.
type Summary struct {
	Elapsed     time.Duration
	Submitted   int
	Phases      map[string]int
	PerCluster  map[string]int // workloads that ran (or run) there
	Attempts    int            // dispatch attempts, requeues included
	Launches    int            // launches counted by the simulated clusters
	Preemptions int
	TimedOut    bool
	Reasons     []string
	Kinds       map[string]int
	m           *monitor
	v           *view
	clusterIDs  []string // the run's spokes, in order
}

func (m *monitor) summarize(ctx context.Context, v *view, mix []*item, now time.Time, timedOut bool) *Summary {
	s := &Summary{Elapsed: now.Sub(m.start), Submitted: int(m.submitted.Load()), Phases: map[string]int{},
		PerCluster: map[string]int{}, TimedOut: timedOut, Reasons: m.reasons, Kinds: map[string]int{}, m: m, v: v}
	for p, n := range phaseCounts(v) {
		s.Phases[phaseName(p)] = n
	}
	for _, w := range v.workloads {
		if c := w.GetStatus().GetCluster(); c != "" {
			s.PerCluster[c]++
		}
		s.Attempts += int(w.GetStatus().GetAttempts())
	}
	for _, it := range mix {
		s.Kinds[it.kind]++
	}
	s.Preemptions = m.preemptions(ctx)
	return s
}

// Write prints the summary for people.
func (s *Summary) Write(w io.Writer) {
	fmt.Fprintf(w, "\n== Meridian demo summary (%.1fs) ==\n", s.Elapsed.Seconds())
	if s.TimedOut {
		fmt.Fprintf(w, "(the demo's time ran out before every workload finished)\n")
	}
	keys := make([]string, 0, len(s.Phases))
	for k := range s.Phases {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", strings.ToLower(k), s.Phases[k]))
	}
	fmt.Fprintf(w, "workloads: %d submitted; %s\n", s.Submitted, strings.Join(parts, ", "))
	fmt.Fprintf(w, "dispatch attempts %d, launches on the clusters %d, preemptions %d\n\n", s.Attempts, s.Launches, s.Preemptions)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tWORKLOADS RUN THERE")
	ids := s.clusterIDs
	if len(ids) == 0 {
		for _, c := range clusters {
			ids = append(ids, c.id)
		}
	}
	for _, id := range ids {
		fmt.Fprintf(tw, "%s\t%d\n", id, s.PerCluster[id])
	}
	tw.Flush()
	fmt.Fprintln(w)
	s.m.teamTable(w, s.v)
	fmt.Fprintln(w, "(the teams share the tenant's GPUs by fairshare weight: a heavier team waits less and finishes sooner)")

	fmt.Fprintln(w, "\nworkload mix:")
	kinds := make([]string, 0, len(s.Kinds))
	for k := range s.Kinds {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(w, "  %4d  %s\n", s.Kinds[k], k)
	}
	if ex := examples(s.Reasons, 6); len(ex) > 0 {
		fmt.Fprintln(w, "\nexample pending reasons seen during the run (meridianctl explain shows them per workload):")
		for _, r := range ex {
			fmt.Fprintf(w, "  - %s\n", r)
		}
	}
}

// examples picks up to n pending reasons of different kinds (by their first
// words), requeue notices last.
func examples(reasons []string, n int) []string {
	kind := func(r string) string {
		f := strings.Fields(strings.Map(func(c rune) rune {
			if c >= '0' && c <= '9' || c == '.' {
				return -1
			}
			return c
		}, r))
		if len(f) > 6 {
			f = f[:6]
		}
		return strings.Join(f, " ")
	}
	var out, later []string
	seen := map[string]bool{}
	for _, r := range reasons {
		k := kind(r)
		if seen[k] {
			continue
		}
		seen[k] = true
		if strings.HasPrefix(r, "requeued:") {
			later = append(later, r)
		} else {
			out = append(out, r)
		}
	}
	out = append(out, later...)
	if len(out) > n {
		out = out[:n]
	}
	return out
}
