package sim

import (
	"encoding/csv"
	"fmt"
	"io"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"
)

// Result is what one simulation run measured. It is deterministic for a
// scenario and seed: no wall-clock figures are in it.
type Result struct {
	Scenario    string       `json:"scenario"`
	Seed        int64        `json:"seed"`
	Duration    string       `json:"duration"`
	Jobs        int          `json:"jobs"`
	Dispatches  int          `json:"dispatches"`
	Completed   int          `json:"completed"`
	Pending     int          `json:"pending_at_end"`
	Preemptions int          `json:"preemptions"`
	Cycles      int          `json:"cycles"`
	Utilization float64      `json:"utilization_pct"`
	WaitP50     float64      `json:"wait_p50_s"`
	WaitP99     float64      `json:"wait_p99_s"`
	Teams       []TeamResult `json:"teams"`
	// MaxShareError is the largest |share - weight share| over the teams, in points.
	MaxShareError float64 `json:"max_share_error_pts"`
}

// TeamResult is one leaf queue's outcome.
type TeamResult struct {
	Queue       string  `json:"queue"`
	Weight      float64 `json:"weight"`
	WeightShare float64 `json:"weight_share_pct"`
	Share       float64 `json:"share_pct"`
	GPUHours    float64 `json:"gpu_hours"`
	Jobs        int     `json:"jobs"`
	Started     int     `json:"started"`
	WaitP50     float64 `json:"wait_p50_s"`
	WaitP99     float64 `json:"wait_p99_s"`
}

func (e *Engine) result() *Result {
	r := &Result{
		Scenario: e.sc.Name, Seed: e.sc.Seed, Duration: time.Duration(e.sc.Duration).String(),
		Jobs: len(e.jobs), Dispatches: e.dispatches, Completed: e.completions,
		Pending: len(e.pending), Preemptions: e.preemptions, Cycles: e.cycles,
	}
	measured := (time.Duration(e.sc.Duration) - time.Duration(e.sc.Warmup)).Seconds()
	var total float64
	for _, q := range sortedKeysF(e.usedGPUSec) { // fixed order: float sums must not depend on map order
		total += e.usedGPUSec[q]
	}
	if e.capacityMill > 0 && measured > 0 {
		r.Utilization = 100 * total / (float64(e.capacityMill) / 1000 * measured)
	}
	// Teams are the leaf queues that received jobs; weight shares are
	// relative among them.
	waits := map[string][]float64{}
	jobs := map[string]int{}
	var all []float64
	for _, js := range e.jobs {
		jobs[js.w.Queue]++
		if js.waited {
			w := js.firstWait.Seconds()
			waits[js.w.Queue] = append(waits[js.w.Queue], w)
			all = append(all, w)
		}
	}
	queues := make([]string, 0, len(jobs))
	var wsum float64
	for q := range jobs {
		queues = append(queues, q)
		wsum += e.tree.Weight(q)
	}
	sort.Strings(queues)
	r.WaitP50, r.WaitP99 = percentile(all, 50), percentile(all, 99)
	for _, q := range queues {
		tr := TeamResult{Queue: q, Weight: e.tree.Weight(q), Jobs: jobs[q], Started: len(waits[q]),
			GPUHours: e.usedGPUSec[q] / 3600, WaitP50: percentile(waits[q], 50), WaitP99: percentile(waits[q], 99)}
		if wsum > 0 {
			tr.WeightShare = 100 * tr.Weight / wsum
		}
		if total > 0 {
			tr.Share = 100 * e.usedGPUSec[q] / total
		}
		if d := abs(tr.Share - tr.WeightShare); d > r.MaxShareError {
			r.MaxShareError = d
		}
		r.Teams = append(r.Teams, tr)
	}
	return r
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// percentile is the nearest-rank percentile of xs (0 for none).
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	k := int(p/100*float64(len(s))+0.5) - 1
	if k < 0 {
		k = 0
	}
	if k >= len(s) {
		k = len(s) - 1
	}
	return s[k]
}

// WriteTable prints the result for people.
func (r *Result) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "scenario %s, seed %d, %s simulated: %d jobs, %d dispatches, %d completed, %d pending at end\n",
		r.Scenario, r.Seed, r.Duration, r.Jobs, r.Dispatches, r.Completed, r.Pending)
	fmt.Fprintf(w, "utilization %.1f%%, preemptions %d, queueing delay p50 %s p99 %s, max share error %.2f points\n\n",
		r.Utilization, r.Preemptions, secs(r.WaitP50), secs(r.WaitP99), r.MaxShareError)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "queue\tweight\tweight share\tGPU share\terror\tGPU-hours\tjobs\tstarted\twait p50\twait p99\t")
	for _, t := range r.Teams {
		fmt.Fprintf(tw, "%s\t%g\t%.1f%%\t%.1f%%\t%+.2f\t%.0f\t%d\t%d\t%s\t%s\t\n", t.Queue, t.Weight, t.WeightShare, t.Share,
			t.Share-t.WeightShare, t.GPUHours, t.Jobs, t.Started, secs(t.WaitP50), secs(t.WaitP99))
	}
	tw.Flush()
}

// WriteCSV writes one row per team.
func (r *Result) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"scenario", "seed", "queue", "weight", "weight_share_pct", "share_pct", "gpu_hours", "jobs", "started", "wait_p50_s", "wait_p99_s", "utilization_pct", "preemptions"})
	for _, t := range r.Teams {
		_ = cw.Write([]string{r.Scenario, strconv.FormatInt(r.Seed, 10), t.Queue, f(t.Weight), f(t.WeightShare), f(t.Share), f(t.GPUHours),
			strconv.Itoa(t.Jobs), strconv.Itoa(t.Started), f(t.WaitP50), f(t.WaitP99), f(r.Utilization), strconv.Itoa(r.Preemptions)})
	}
	cw.Flush()
	return cw.Error()
}

func f(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }

func secs(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Second).String()
}

func sortedKeysF(m map[string]float64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
