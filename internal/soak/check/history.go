package check

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// WorkloadPrefix is where the hub keeps workloads in etcd.
const WorkloadPrefix = "/meridian/workloads/"

// Caps are each queue's cap per accelerator class in milli-GPUs (nominal +
// borrow limit); a queue or class not listed has no cap to check.
type Caps map[string]map[string]int64

// QuotaViolation is one revision at which a queue held more than its cap.
type QuotaViolation struct {
	Revision int64  `json:"revision"`
	Queue    string `json:"queue"`
	Class    string `json:"class"`
	Usage    int64  `json:"usage_milli"`
	Cap      int64  `json:"cap_milli"`
}

// Dispatch is one dispatch commit as the watch saw it.
type Dispatch struct {
	Seen       time.Time
	Revision   int64
	WorkloadID string
	DispatchID string
	Cluster    string
	Term       int64
}

// MoveAway is how the hub took a workload away from a dispatch.
type MoveAway struct {
	Seen     time.Time
	Cluster  string
	Why      string // "lost", "preempted", "rejected" or "other"
	Reason   string
	Revision int64
}

// WorkloadState is a workload's last known state.
type WorkloadState struct {
	Queue, Phase, DispatchID, Cluster, PendingReason string
	Deleted                                          bool
	charge                                           map[string]int64 // while active
}

// History follows the workload keys. Start it with Follow.
type History struct {
	caps Caps

	mu         sync.Mutex
	ws         map[string]*WorkloadState
	usage      map[string]map[string]int64 // queue path and every ancestor -> class -> milli
	violations []QuotaViolation
	nViol      int
	maxTerm    int64
	stale      []Dispatch
	dispatches []Dispatch
	moved      map[string]MoveAway // dispatch id -> how the hub left it
	lastRev    int64
	watchErrs  []string
	resumes    int // watches cancelled without losing history, resumed
	undecoded  int
	inFlight   int
}

// NewHistory returns a history checking caps.
func NewHistory(caps Caps) *History {
	return &History{caps: caps, ws: map[string]*WorkloadState{}, usage: map[string]map[string]int64{}, moved: map[string]MoveAway{}}
}

// Follow watches the workload keys from revision from (inclusive) until
// ctx ends, resuming after a broken watch from the last revision seen.
func (h *History) Follow(ctx context.Context, c *clientv3.Client, from int64) {
	next := from
	for ctx.Err() == nil {
		wch := c.Watch(clientv3.WithRequireLeader(ctx), WorkloadPrefix, clientv3.WithPrefix(), clientv3.WithRev(next))
		for resp := range wch {
			if err := resp.Err(); err != nil {
				h.mu.Lock()
				if resp.CompactRevision > 0 {
					// History lost: the revisions up to the compaction
					// cannot be checked. Say so, go on.
					h.watchErrs = append(h.watchErrs, fmt.Sprintf("at revision %d: %v", next, err))
					next = resp.CompactRevision
				} else {
					// Cancelled (the etcd member lost its leader): the
					// watch resumes from the next revision, nothing missed.
					h.resumes++
				}
				h.mu.Unlock()
				break
			}
			h.apply(resp.Events, time.Now())
			if n := h.LastRevision(); n >= next {
				next = n + 1
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// LastRevision is the last revision applied.
func (h *History) LastRevision() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastRev
}

// InFlight counts workloads that are neither finished nor deleted.
func (h *History) InFlight() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inFlight
}

func active(p meridianv1.WorkloadPhase) bool {
	return p == meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED ||
		p == meridianv1.WorkloadPhase_WORKLOAD_PHASE_ACCEPTED ||
		p == meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING
}

func terminal(p string) bool {
	return p == "SUCCEEDED" || p == "FAILED" || p == "CANCELLED"
}

func phaseName(p meridianv1.WorkloadPhase) string {
	return strings.TrimPrefix(p.String(), "WORKLOAD_PHASE_")
}

// apply replays one watch response; events come in revision order, and
// the caps are checked after each revision's last event.
func (h *History) apply(evs []*clientv3.Event, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	touched := map[string]bool{}
	for i, ev := range evs {
		rev := ev.Kv.ModRevision
		id := strings.TrimPrefix(string(ev.Kv.Key), WorkloadPrefix)
		if ev.Type == clientv3.EventTypeDelete {
			if s := h.ws[id]; s != nil && !s.Deleted {
				h.setCharge(s, nil, touched)
				if !terminal(s.Phase) {
					h.inFlight--
				}
				s.Deleted = true
			}
		} else {
			w := &meridianv1.Workload{}
			if err := proto.Unmarshal(ev.Kv.Value, w); err != nil {
				h.undecoded++
			} else {
				h.put(id, w, rev, now, touched)
			}
		}
		if i == len(evs)-1 || evs[i+1].Kv.ModRevision != rev {
			h.checkCaps(rev, touched)
			clear(touched)
			h.lastRev = rev
		}
	}
}

func (h *History) put(id string, w *meridianv1.Workload, rev int64, now time.Time, touched map[string]bool) {
	st := w.GetStatus()
	s := h.ws[id]
	if s == nil || s.Deleted {
		s = &WorkloadState{Queue: w.GetQueue()}
		h.ws[id] = s
		h.inFlight++
	}
	prevPhase, prevDispatch, prevCluster := s.Phase, s.DispatchID, s.Cluster
	phase := phaseName(st.GetPhase())
	if terminal(phase) && !terminal(prevPhase) {
		h.inFlight--
	}
	s.Phase, s.DispatchID, s.Cluster, s.PendingReason = phase, st.GetDispatchId(), st.GetCluster(), st.GetPendingReason()
	var charge map[string]int64
	if active(st.GetPhase()) {
		for _, c := range st.GetQuotaCharge() {
			if charge == nil {
				charge = map[string]int64{}
			}
			charge[c.GetAcceleratorClass()] += c.GetMilliGpus()
		}
	}
	h.setCharge(s, charge, touched)
	if st.GetPhase() == meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED && st.GetDispatchId() != "" && st.GetDispatchId() != prevDispatch {
		d := Dispatch{Seen: now, Revision: rev, WorkloadID: id, DispatchID: st.GetDispatchId(), Cluster: st.GetCluster(), Term: st.GetDispatchTerm()}
		if d.Term < h.maxTerm {
			h.stale = append(h.stale, d)
		}
		h.maxTerm = max(h.maxTerm, d.Term)
		h.dispatches = append(h.dispatches, d)
	}
	if prevDispatch != "" && (st.GetDispatchId() != prevDispatch || !active(st.GetPhase())) && !terminal(prevPhase) {
		if _, seen := h.moved[prevDispatch]; !seen && !terminal(phase) {
			h.moved[prevDispatch] = MoveAway{Seen: now, Cluster: prevCluster, Revision: rev, Why: why(w), Reason: st.GetPendingReason() + " " + st.GetMessage()}
		}
	}
}

// why classifies a move away from a dispatch by what the hub wrote.
func why(w *meridianv1.Workload) string {
	st := w.GetStatus()
	text := st.GetPendingReason() + " " + st.GetMessage()
	switch {
	case st.GetPhase() == meridianv1.WorkloadPhase_WORKLOAD_PHASE_PREEMPTED:
		return "preempted"
	case strings.Contains(text, "was lost"):
		return "lost"
	case strings.Contains(strings.ToLower(text), "preempt"):
		return "preempted"
	case strings.Contains(strings.ToLower(text), "reject"):
		return "rejected"
	}
	return "other"
}

// setCharge replaces s's charge, adjusting its queue and every ancestor.
func (h *History) setCharge(s *WorkloadState, charge map[string]int64, touched map[string]bool) {
	if len(s.charge) == 0 && len(charge) == 0 {
		return
	}
	for _, q := range ancestors(s.Queue) {
		u := h.usage[q]
		if u == nil {
			u = map[string]int64{}
			h.usage[q] = u
		}
		for c, m := range s.charge {
			u[c] -= m
		}
		for c, m := range charge {
			u[c] += m
		}
		touched[q] = true
	}
	s.charge = charge
}

// ancestors lists a queue path and each of its parents.
func ancestors(q string) []string {
	var out []string
	for {
		out = append(out, q)
		i := strings.LastIndexByte(q, '/')
		if i < 0 {
			return out
		}
		q = q[:i]
	}
}

func (h *History) checkCaps(rev int64, touched map[string]bool) {
	for q := range touched {
		for c, cap := range h.caps[q] {
			if u := h.usage[q][c]; u > cap {
				h.nViol++
				if len(h.violations) < 20 {
					h.violations = append(h.violations, QuotaViolation{Revision: rev, Queue: q, Class: c, Usage: u, Cap: cap})
				}
			}
		}
	}
}

// Report is what the history saw.
type Report struct {
	LastRevision    int64
	QuotaViolations int
	Violations      []QuotaViolation
	StaleTerm       []Dispatch
	Dispatches      []Dispatch
	Moved           map[string]MoveAway
	Workloads       map[string]WorkloadState
	WatchErrors     []string // history lost to compaction
	WatchResumes    int      // watches cancelled and resumed, nothing missed
	Undecoded       int
}

// Report returns a copy of what the history saw so far.
func (h *History) Report() Report {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := Report{LastRevision: h.lastRev, QuotaViolations: h.nViol, Violations: append([]QuotaViolation(nil), h.violations...),
		StaleTerm: append([]Dispatch(nil), h.stale...), Dispatches: append([]Dispatch(nil), h.dispatches...),
		Moved: make(map[string]MoveAway, len(h.moved)), Workloads: make(map[string]WorkloadState, len(h.ws)),
		WatchErrors: append([]string(nil), h.watchErrs...), WatchResumes: h.resumes, Undecoded: h.undecoded}
	for k, v := range h.moved {
		r.Moved[k] = v
	}
	for k, v := range h.ws {
		c := *v
		c.charge = nil
		r.Workloads[k] = c
	}
	return r
}
