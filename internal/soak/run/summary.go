package run

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/meridian-gpu/meridian/internal/soak/check"
	"github.com/meridian-gpu/meridian/internal/soak/faults"
	"github.com/meridian-gpu/meridian/internal/soak/load"
)

// Summary is a soak's outcome; its JSON is the run's last line.
type Summary struct {
	Seed      uint64  `json:"seed"`
	DurationS float64 `json:"duration_s"`
	// Load.
	RateTarget      float64 `json:"rate_target"`
	RateAchieved    float64 `json:"rate_achieved"`
	Submitted       int     `json:"submitted"` // acknowledged submits
	SubmitErrors    int     `json:"submit_errors"`
	SubmitErrorRate float64 `json:"submit_error_rate"`
	SubmitP50Ms     float64 `json:"submit_p50_ms"`
	SubmitP99Ms     float64 `json:"submit_p99_ms"`
	Skipped         int64   `json:"skipped"` // due but not sent: the driver could not keep up
	Held            int64   `json:"held"`    // due but held back: too many in flight
	InFlightPeak    int     `json:"in_flight_peak"`
	// During faults (submits scheduled between a fault's injection and 2 s
	// after its recovery).
	FaultSubmits         int     `json:"fault_submits"`
	FaultSubmitErrorRate float64 `json:"fault_submit_error_rate"`
	FaultSubmitP99Ms     float64 `json:"fault_submit_p99_ms"`
	// FaultSubmitErrors counts, per fault kind, the submits due in its
	// windows and how many of them failed: "kind": [due, failed].
	FaultSubmitErrors map[string][2]int `json:"fault_submit_errors_by_kind"`
	// Invariants: each must be 0.
	Lost             int `json:"lost"`
	QueuedNoReason   int `json:"queued_no_reason"`
	DoubleLaunches   int `json:"double_launches"` // same dispatch twice + gang splits + overlapping runs
	QuotaViolations  int `json:"quota_violations"`
	KilledByFault    int `json:"killed_by_fault"`
	StaleTermCommits int `json:"stale_term_commits"`
	// Detail.
	Unsettled            int            `json:"unsettled"` // acknowledged, still dispatched or running after the settle wait
	Finished             map[string]int `json:"finished"`  // acknowledged workloads by last phase
	Launches             int            `json:"launches"`
	Repeats              int            `json:"repeats"`
	GangSplits           int            `json:"gang_splits"`
	Overlaps             int            `json:"overlaps"`
	OverlapsThroughLost  int            `json:"overlaps_through_lost"`
	Preempted            int            `json:"preempted"`
	CancelledThroughLost int            `json:"cancelled_through_lost"`
	Requeues             map[string]int `json:"requeues"` // by why
	UnknownDispatches    int            `json:"unknown_dispatches"`
	Dispatches           int            `json:"dispatches"`
	// Failover: from each leader fault to the next dispatch commit. A
	// leader kill or pause counts from the signal, since the other
	// replicas are up to take over; restarting every hub counts from the
	// restart, since until then no hub runs by design (the fault's hold),
	// and FailoverFromKill has that one from the kill as well.
	Failovers        int                `json:"failovers"` // leader faults measured; 0: the p50 and max mean nothing
	FailoverP50S     float64            `json:"failover_p50_s"`
	FailoverMaxS     float64            `json:"failover_max_s"`
	FailoverByKey    map[string]float64 `json:"failover_by_fault"`
	FailoverFromKill map[string]float64 `json:"failover_from_kill_by_fault,omitempty"`
	GoalFailover     bool               `json:"failover_goal_met"` // max <= 5 s
	// Faults.
	Faults      int             `json:"faults"`
	FaultKinds  map[string]int  `json:"fault_kinds"`
	FaultErrors int             `json:"fault_errors"`
	Timeline    []faults.Record `json:"-"`
	WatchErrors []string        `json:"watch_errors,omitempty"`
	// WatchResumes counts the history watch's cancellations (an etcd
	// member without a leader) that resumed without losing a revision.
	WatchResumes int      `json:"watch_resumes"`
	Failures     []string `json:"failures,omitempty"`
	Samples      []string `json:"samples,omitempty"`
	OK           bool     `json:"ok"`
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	i := int(float64(len(ds)-1) * p)
	return ds[i]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func summarize(cfg Config, start, loadEnd time.Time, drv *load.Driver, h check.Report, ls []check.Launch, recs []faults.Record, peak int) *Summary {
	s := &Summary{Seed: cfg.Seed, DurationS: loadEnd.Sub(start).Seconds(), RateTarget: cfg.Rate, InFlightPeak: peak,
		Finished: map[string]int{}, Requeues: map[string]int{}, FaultKinds: map[string]int{}, FailoverByKey: map[string]float64{}, FailoverFromKill: map[string]float64{},
		Timeline: recs, WatchErrors: h.WatchErrors, WatchResumes: h.WatchResumes}
	st := drv.Stats()
	s.Skipped, s.Held = st.Skipped, st.Held

	// Faults and the windows they cover.
	type window struct {
		from, till time.Time
		kind       string
	}
	s.FaultSubmitErrors = map[string][2]int{}
	var wins []window
	var lostWins []check.Window
	for _, r := range recs {
		s.Faults++
		s.FaultKinds[string(r.Kind)]++
		if r.Err != "" {
			s.FaultErrors++
			s.Samples = append(s.Samples, fmt.Sprintf("fault %s %s: %s", r.Kind, r.Target, r.Err))
		}
		till := r.Restored
		if till.IsZero() {
			till = loadEnd
		}
		wins = append(wins, window{r.Injected, till.Add(2 * time.Second), string(r.Kind)})
		if r.Kind == faults.AgentStopLong || r.Kind == faults.AgentCut {
			lostWins = append(lostWins, check.Window{Cluster: strings.TrimPrefix(r.Target, "agent-"),
				From: r.Injected.Add(cfg.ClusterTimeout / 2), Till: till.Add(30 * time.Second)})
		}
	}
	inFault := func(t time.Time, failed bool) bool {
		for _, w := range wins {
			if !t.Before(w.from) && !t.After(w.till) {
				c := s.FaultSubmitErrors[w.kind]
				c[0]++
				if failed {
					c[1]++
				}
				s.FaultSubmitErrors[w.kind] = c
				return true
			}
		}
		return false
	}

	// Submits.
	var lat, faultLat []time.Duration
	faultErr := 0
	for _, r := range drv.Results() {
		f := inFault(r.Scheduled, r.Err != "")
		if f {
			s.FaultSubmits++
		}
		if r.Err != "" {
			s.SubmitErrors++
			if f {
				faultErr++
			}
			if len(s.Samples) < 30 && s.SubmitErrors <= 5 {
				s.Samples = append(s.Samples, fmt.Sprintf("submit %d at %s: %s", r.Index, r.Scheduled.Format("15:04:05.000"), r.Err))
			}
			continue
		}
		s.Submitted++
		lat = append(lat, r.Latency())
		if f {
			faultLat = append(faultLat, r.Latency())
		}
		w, ok := h.Workloads[r.ID]
		switch {
		case !ok:
			s.Lost++
			s.Samples = append(s.Samples, fmt.Sprintf("lost: workload %s (submit %d) acknowledged, never seen in etcd", r.ID, r.Index))
		case w.Deleted || w.Phase == "SUCCEEDED" || w.Phase == "FAILED" || w.Phase == "CANCELLED":
			s.Finished[w.Phase]++
		case w.Phase == "QUEUED" || w.Phase == "PREEMPTED":
			s.Finished["QUEUED"]++
			if w.PendingReason == "" {
				s.QueuedNoReason++
			}
		default:
			s.Unsettled++
			s.Finished[w.Phase]++
		}
	}
	if n := len(lat) + s.SubmitErrors; n > 0 {
		s.SubmitErrorRate = float64(s.SubmitErrors) / float64(n)
	}
	s.RateAchieved = float64(s.Submitted) / s.DurationS
	s.SubmitP50Ms, s.SubmitP99Ms = ms(percentile(lat, 0.5)), ms(percentile(lat, 0.99))
	if s.FaultSubmits > 0 {
		s.FaultSubmitErrorRate = float64(faultErr) / float64(s.FaultSubmits)
	}
	s.FaultSubmitP99Ms = ms(percentile(faultLat, 0.99))

	// History.
	s.QuotaViolations = h.QuotaViolations
	for _, v := range h.Violations {
		if len(s.Samples) < 40 {
			s.Samples = append(s.Samples, fmt.Sprintf("quota: %s %s held %d milli > cap %d at revision %d", v.Queue, v.Class, v.Usage, v.Cap, v.Revision))
		}
	}
	s.StaleTermCommits = len(h.StaleTerm)
	for _, d := range h.StaleTerm {
		if len(s.Samples) < 40 {
			s.Samples = append(s.Samples, fmt.Sprintf("stale term: dispatch %s of %s committed with term %d at revision %d after a newer term", d.DispatchID, d.WorkloadID, d.Term, d.Revision))
		}
	}
	s.Dispatches = len(h.Dispatches)
	spurious := 0
	for id, m := range h.Moved {
		s.Requeues[m.Why]++
		if m.Why == "lost" && !inLost(lostWins, m.Cluster, m.Seen) {
			spurious++
			if len(s.Samples) < 40 {
				s.Samples = append(s.Samples, fmt.Sprintf("requeued through LOST while %s was not stopped: dispatch %s at %s (%s)", m.Cluster, id, m.Seen.Format("15:04:05.000"), m.Reason))
			}
		}
	}

	// Launches.
	lr := check.CheckLaunches(ls, h, lostWins)
	s.Launches, s.Repeats, s.GangSplits, s.Overlaps, s.OverlapsThroughLost = lr.Launches, lr.Repeats, lr.GangSplits, lr.Overlaps, lr.OverlapsThroughLost
	s.Preempted, s.CancelledThroughLost, s.UnknownDispatches = lr.Preempted, lr.CancelledThroughLost, lr.UnknownDispatches
	s.DoubleLaunches = lr.DoubleLaunches + lr.GangSplits + lr.Overlaps
	s.KilledByFault = lr.Killed + spurious
	for _, x := range lr.Samples {
		if len(s.Samples) < 60 {
			s.Samples = append(s.Samples, x)
		}
	}

	// Failover.
	var fo []time.Duration
	for _, r := range recs {
		if !r.Kind.Leader() || r.Injected.IsZero() || r.Err != "" {
			continue
		}
		from := r.Injected
		if r.Kind == faults.HubsRestartAll && !r.Restarted.IsZero() {
			from = r.Restarted
		}
		i := sort.Search(len(h.Dispatches), func(i int) bool { return h.Dispatches[i].Seen.After(from) })
		key := fmt.Sprintf("%s@%s", r.Kind, r.Injected.Format("15:04:05"))
		if i == len(h.Dispatches) {
			s.Samples = append(s.Samples, "no dispatch after "+key)
			fo = append(fo, loadEnd.Sub(from))
			continue
		}
		d := h.Dispatches[i].Seen.Sub(from)
		fo = append(fo, d)
		s.FailoverByKey[key] = d.Seconds()
		if from != r.Injected {
			s.FailoverFromKill[key] = h.Dispatches[i].Seen.Sub(r.Injected).Seconds()
		}
	}
	s.Failovers = len(fo)
	if len(fo) > 0 {
		s.FailoverP50S = percentile(fo, 0.5).Seconds()
		s.FailoverMaxS = percentile(fo, 1).Seconds()
	}
	s.GoalFailover = s.FailoverMaxS <= 5

	for _, f := range []struct {
		n    int
		what string
	}{
		{s.Lost, "lost"}, {s.QueuedNoReason, "queued_no_reason"}, {s.DoubleLaunches, "double_launches"},
		{s.QuotaViolations, "quota_violations"}, {s.KilledByFault, "killed_by_fault"}, {s.StaleTermCommits, "stale_term_commits"},
		{s.FaultErrors, "fault_errors"}, {len(s.WatchErrors), "watch_errors"},
	} {
		if f.n > 0 {
			s.Failures = append(s.Failures, fmt.Sprintf("%s=%d", f.what, f.n))
		}
	}
	s.OK = len(s.Failures) == 0
	return s
}

func inLost(ws []check.Window, cluster string, t time.Time) bool {
	for _, w := range ws {
		if w.Cluster == cluster && !t.Before(w.From) && !t.After(w.Till) {
			return true
		}
	}
	return false
}
