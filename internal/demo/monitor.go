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
	o         Options
	out, err  io.Writer
	start     time.Time
	submitted atomic.Int64

	gpuSeconds map[string]float64 // team -> GPU-seconds while contended, from queue usage
	// contendedSeconds is how long every team had work waiting.
	contendedSeconds float64
	lastPoll         time.Time
	reasons          []string // distinct pending reasons, in the order first seen
	seen             map[string]bool
}

func newMonitor(c client, httpAddr string, o Options, out, err io.Writer, start time.Time) *monitor {
	return &monitor{c: c, httpAddr: httpAddr, o: o, out: out, err: err, start: start,
		gpuSeconds: map[string]float64{}, seen: map[string]bool{}}
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

// integrate adds each team's current GPU usage over the time since the
// last poll: the hub's own accounting, as `meridianctl queues` shows it.
func (m *monitor) integrate(v *view, now time.Time) {
	// Shares are measured only while every team has work waiting: weights
	// split contended capacity, and an idle team's quota is lent, not lost.
	waiting := map[string]bool{}
	for _, w := range v.workloads {
		if w.GetStatus().GetPhase() == meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED {
			waiting[w.GetQueue()] = true
		}
	}
	contended := true
	for _, t := range teams {
		contended = contended && waiting[t.path]
	}
	if !m.lastPoll.IsZero() && contended {
		dt := now.Sub(m.lastPoll).Seconds()
		m.contendedSeconds += dt
		for _, t := range teams {
			m.gpuSeconds[t.path] += float64(usageMilli(v.queues[t.path])) / 1000 * dt
		}
	}
	m.lastPoll = now
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
		m.integrate(v, now)
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
	fmt.Fprintf(w, "team shares while all teams had work waiting (%.0fs so far):\n", m.contendedSeconds)
	fmt.Fprintln(tw, "TEAM\tWEIGHT\tGPUS NOW\tGPU-SECONDS\tSHARE\tWEIGHT SHARE")
	var total float64
	var wsum int32
	for _, t := range teams {
		total += m.gpuSeconds[t.path]
		wsum += t.weight
	}
	for _, t := range teams {
		share := 0.0
		if total > 0 {
			share = 100 * m.gpuSeconds[t.path] / total
		}
		var q *meridianv1.Queue
		if v != nil {
			q = v.queues[t.path]
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.0f\t%.1f%%\t%.1f%%\n", t.path, t.weight, float64(usageMilli(q))/1000,
			m.gpuSeconds[t.path], share, 100*float64(t.weight)/float64(wsum))
	}
	tw.Flush()
}

// preemptions reads the hub's own counter from /metrics.
func (m *monitor) preemptions(ctx context.Context) int {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.httpAddr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "meridian_preemptions_total ") {
			f, err := strconv.ParseFloat(strings.TrimPrefix(line, "meridian_preemptions_total "), 64)
			if err == nil {
				return int(f)
			}
		}
	}
	return -1
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
	Teams       []TeamShare
	Reasons     []string
	Kinds       map[string]int
	m           *monitor
	v           *view
}

// TeamShare is one team's measured GPU time against its weight.
type TeamShare struct {
	Queue       string
	Weight      int32
	GPUSeconds  float64
	Share       float64
	WeightShare float64
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
	var total float64
	var wsum int32
	for _, t := range teams {
		total += m.gpuSeconds[t.path]
		wsum += t.weight
	}
	for _, t := range teams {
		ts := TeamShare{Queue: t.path, Weight: t.weight, GPUSeconds: m.gpuSeconds[t.path], WeightShare: 100 * float64(t.weight) / float64(wsum)}
		if total > 0 {
			ts.Share = 100 * ts.GPUSeconds / total
		}
		s.Teams = append(s.Teams, ts)
	}
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
	for _, c := range clusters {
		fmt.Fprintf(tw, "%s\t%d\n", c.id, s.PerCluster[c.id])
	}
	tw.Flush()
	fmt.Fprintln(w)
	s.m.teamTable(w, nil)
	fmt.Fprintln(w, "(each team's nominal quota is its weight share of every GPU class; idle quota is lent and reclaimed by preemption)")

	fmt.Fprintln(w, "\nworkload mix:")
	kinds := make([]string, 0, len(s.Kinds))
	for k := range s.Kinds {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(w, "  %4d  %s\n", s.Kinds[k], k)
	}
	if len(s.Reasons) > 0 {
		fmt.Fprintln(w, "\nexample pending reasons (meridianctl explain shows them per workload):")
		for i, r := range s.Reasons {
			if i == 6 {
				break
			}
			fmt.Fprintf(w, "  - %s\n", r)
		}
	}
}
