package check

import (
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/meridian-gpu/meridian/connectors/simcluster"
)

// Window is a time a cluster was legitimately LOST (its agent paused past
// the cluster timeout): runs the hub moves away from then are requeues
// through LOST, not kills.
type Window struct {
	Cluster    string
	From, Till time.Time
}

func inWindow(ws []Window, cluster string, t time.Time) bool {
	for _, w := range ws {
		if w.Cluster == cluster && !t.Before(w.From) && !t.After(w.Till) {
			return true
		}
	}
	return false
}

// Launch is one run on a cluster, from its journal.
type Launch struct {
	Cluster, DispatchID, WorkloadID string
	Start, End                      time.Time // End zero: still running
	State                           string
	Replicas, Wanted                int
}

// LaunchReport is what the clusters' journals say.
type LaunchReport struct {
	Launches, Repeats, Ended int
	Preempted                int
	// DoubleLaunches: a dispatch id launched more than once (on one
	// cluster or several); GangSplits: a launch placing fewer replicas
	// than its gang needs; Overlaps: one workload running under two
	// dispatches at once, outside a LOST window of the earlier one's
	// cluster (OverlapsThroughLost counts those inside one).
	DoubleLaunches, GangSplits, Overlaps, OverlapsThroughLost int
	// Killed: runs cancelled by the hub that no LOST cluster or
	// preemption explains; CancelledThroughLost: those a LOST explains.
	Killed, CancelledThroughLost int
	// UnknownDispatches: launches of a dispatch id etcd never recorded.
	UnknownDispatches int
	Samples           []string
}

func (r *LaunchReport) sample(format string, args ...any) {
	if len(r.Samples) < 20 {
		r.Samples = append(r.Samples, fmt.Sprintf(format, args...))
	}
}

// ReadLaunches reads every cluster's journal (cluster id -> file).
func ReadLaunches(journals map[string]string) ([]Launch, error) {
	var out []Launch
	for cluster, path := range journals {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		es, err := simcluster.ReadJournal(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cluster, err)
		}
		open := map[string]int{}
		for _, e := range es {
			switch e.Event {
			case simcluster.JournalLaunch:
				open[e.DispatchID] = len(out)
				out = append(out, Launch{Cluster: cluster, DispatchID: e.DispatchID, WorkloadID: e.WorkloadID, Start: e.Time,
					Replicas: e.Replicas, Wanted: e.Wanted})
			case simcluster.JournalRepeat:
				out = append(out, Launch{Cluster: cluster, DispatchID: e.DispatchID, WorkloadID: e.WorkloadID, Start: e.Time, State: simcluster.JournalRepeat})
			case simcluster.JournalEnd:
				if i, ok := open[e.DispatchID]; ok {
					out[i].End, out[i].State = e.Time, e.State
					delete(open, e.DispatchID)
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out, nil
}

// CheckLaunches judges the launches against the history and the LOST
// windows.
func CheckLaunches(ls []Launch, h Report, lost []Window) LaunchReport {
	var r LaunchReport
	known := map[string]bool{}
	for _, d := range h.Dispatches {
		known[d.DispatchID] = true
	}
	byDispatch := map[string]int{}
	byWorkload := map[string][]Launch{}
	for _, l := range ls {
		if l.State == simcluster.JournalRepeat {
			r.Repeats++
			continue
		}
		r.Launches++
		byDispatch[l.DispatchID]++
		if byDispatch[l.DispatchID] == 2 {
			r.DoubleLaunches++
			r.sample("dispatch %s (workload %s) launched again on %s at %s", l.DispatchID, l.WorkloadID, l.Cluster, l.Start.Format(time.RFC3339Nano))
		}
		if l.Replicas < l.Wanted {
			r.GangSplits++
			r.sample("dispatch %s placed %d of %d replicas on %s", l.DispatchID, l.Replicas, l.Wanted, l.Cluster)
		}
		if !known[l.DispatchID] {
			r.UnknownDispatches++
		}
		if !l.End.IsZero() {
			r.Ended++
		}
		switch l.State {
		case "PREEMPTED":
			r.Preempted++
		case "CANCELLED":
			m, ok := h.Moved[l.DispatchID]
			switch {
			case ok && m.Why == "lost" && inWindow(lost, l.Cluster, m.Seen):
				r.CancelledThroughLost++
			case inWindow(lost, l.Cluster, l.End):
				r.CancelledThroughLost++
			default:
				r.Killed++
				why := "the hub never moved the workload off it"
				if ok {
					why = fmt.Sprintf("the hub moved it away (%s: %s) at %s", m.Why, m.Reason, m.Seen.Format("15:04:05.000"))
				}
				r.sample("dispatch %s (workload %s) on %s cancelled at %s; %s", l.DispatchID, l.WorkloadID, l.Cluster, l.End.Format("15:04:05.000"), why)
			}
		}
		byWorkload[l.WorkloadID] = append(byWorkload[l.WorkloadID], l)
	}
	for _, runs := range byWorkload {
		for i := 1; i < len(runs); i++ {
			prev, cur := runs[i-1], runs[i]
			if prev.DispatchID == cur.DispatchID || (!prev.End.IsZero() && !prev.End.After(cur.Start)) {
				continue
			}
			if inWindow(lost, prev.Cluster, cur.Start) || (h.Moved[prev.DispatchID].Why == "lost") {
				r.OverlapsThroughLost++
				continue
			}
			r.Overlaps++
			r.sample("workload %s ran as %s on %s and as %s on %s at once (%s)", cur.WorkloadID, prev.DispatchID, prev.Cluster, cur.DispatchID, cur.Cluster, cur.Start.Format("15:04:05.000"))
		}
	}
	return r
}
