package dispatch

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/scheduler"
	"github.com/meridian-gpu/meridian/hub/store"
	"github.com/meridian-gpu/meridian/internal/protofast"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// Condition types and texts shared with the API.
const (
	// ConditionCancelRequested is appended by the API to dispatched work
	// the user cancelled.
	ConditionCancelRequested = "CancelRequested"
	// ConditionClusterBackoff excludes one cluster (Reason) until its
	// LastTransitionTime; Message counts the rejections.
	ConditionClusterBackoff = "ClusterBackoff"
	// PendingWaitingForScheduler is the reason the API writes on submit.
	PendingWaitingForScheduler = "waiting for the scheduler"
	// CodeWaitingForScheduler is WorkloadStatus.pending_reason_code while
	// nothing has been decided for the current attempt yet: on submit and
	// after a requeue, until the next cycle gives a reason.
	CodeWaitingForScheduler = "WaitingForScheduler"
)

// LedgerKey holds the fairshare ledger's JSON.
const LedgerKey = store.Root + "/ledger"

// Record is what the hub knows of one dispatch. A hub now keeps it inside
// the workload's status (assignment, quota_charge, dispatch_term,
// dispatch_trace_parent; see foldRecord), written in the same put that
// marks the workload DISPATCHED, so a dispatch costs no key of its own.
// Hubs before that wrote it as JSON at /meridian/dispatches/<id>; those
// records are still read, acknowledged, requeued and deleted as before
// (legacyRecord), so an upgrade mid-flight loses nothing.
type Record struct {
	DispatchID string `json:"dispatchId"`
	WorkloadID string `json:"workloadId"`
	Queue      string `json:"queue"`
	Cluster    string `json:"cluster"`
	Attempt    int32  `json:"attempt"`
	// Placement is the per-replica node and GPU hint the core chose.
	Placement []scheduler.PodSetPlacement `json:"placement"`
	// Usage is the quota the dispatch holds, per class.
	Usage []scheduler.ClassMilli `json:"usage"`
	// Acked and AckedAt are how hubs before the workload's accept_time
	// recorded the agent's acceptance; a hub now writes the acceptance
	// into the workload alone (one write fewer per dispatch) and reads
	// either (acked, ackedAt).
	Acked     bool      `json:"acked"`
	AckedAt   time.Time `json:"ackedAt,omitzero"`
	CreatedAt time.Time `json:"createdAt"`
	// LeaderTerm is the election revision of the leader that committed it.
	LeaderTerm int64 `json:"leaderTerm"`
	// TraceParent is the W3C traceparent of the dispatch's span when the
	// workload is traced (see tracing.go); publishes continue it. Records
	// written before it existed have none.
	TraceParent string `json:"traceParent,omitempty"`
}

// DispatchKey is the etcd key of a dispatch record.
func DispatchKey(id string) (string, error) { return store.Key(store.KindDispatches, id) }

// WorkloadKey is the etcd key of a workload.
func WorkloadKey(id string) (string, error) { return store.Key(store.KindWorkloads, id) }

// ClusterKey holds a cluster's operator settings (the drain flag).
func ClusterKey(id string) (string, error) { return store.Key(store.KindClusters, id) }

// clusterSettings is the JSON at ClusterKey.
type clusterSettings struct {
	Draining bool   `json:"draining"`
	Reason   string `json:"reason,omitempty"`
}

// foldRecord writes r into the workload status st, the dispatch's only
// stored copy: the scheduler's placement, the quota charged, the leader
// term and the trace parent (dispatch id, cluster, attempt and dispatch
// time are status fields already).
func foldRecord(st *meridianv1.WorkloadStatus, r *Record) {
	st.Assignment = make([]*meridianv1.PodSetAssignment, 0, len(r.Placement))
	for _, p := range r.Placement {
		a := &meridianv1.PodSetAssignment{PodSet: p.PodSet, MigProfile: p.MIG, Replicas: make([]*meridianv1.ReplicaAssignment, 0, len(p.Replicas))}
		for _, rp := range p.Replicas {
			ra := &meridianv1.ReplicaAssignment{Node: rp.Node}
			if len(rp.GPUs) > 0 {
				ra.Gpus = make([]int32, len(rp.GPUs))
				for i, g := range rp.GPUs {
					ra.Gpus[i] = int32(g)
				}
			}
			a.Replicas = append(a.Replicas, ra)
		}
		st.Assignment = append(st.Assignment, a)
	}
	st.QuotaCharge = make([]*meridianv1.ClassCharge, 0, len(r.Usage))
	for _, u := range r.Usage {
		st.QuotaCharge = append(st.QuotaCharge, &meridianv1.ClassCharge{AcceleratorClass: u.Class, MilliGpus: u.Milli})
	}
	st.DispatchTerm = r.LeaderTerm
	st.DispatchTraceParent = r.TraceParent
}

// clearFolded forgets the dispatch a requeue takes the workload away from.
func clearFolded(st *meridianv1.WorkloadStatus) {
	st.Assignment, st.QuotaCharge, st.DispatchTerm, st.DispatchTraceParent = nil, nil, 0, ""
}

// recordHeadOf is recordOf without the placement, which the agents' events
// never read: the replicas' nodes and GPUs were most of what rebuilding
// a record for each event allocated.
func recordHeadOf(w *meridianv1.Workload) *Record {
	st := w.GetStatus()
	r := &Record{DispatchID: st.GetDispatchId(), WorkloadID: w.GetId(), Queue: w.GetQueue(), Cluster: st.GetCluster(),
		Attempt: st.GetAttempts(), LeaderTerm: st.GetDispatchTerm(), TraceParent: st.GetDispatchTraceParent()}
	if dt := st.GetDispatchTime(); dt != nil {
		r.CreatedAt = dt.AsTime()
	}
	if len(st.GetQuotaCharge()) > 0 {
		r.Usage = make([]scheduler.ClassMilli, 0, len(st.GetQuotaCharge()))
	}
	for _, c := range st.GetQuotaCharge() {
		r.Usage = append(r.Usage, scheduler.ClassMilli{Class: c.GetAcceleratorClass(), Milli: c.GetMilliGpus()})
	}
	return r
}

// folded reports whether w's current dispatch is kept in the workload
// itself: a dispatch committed by a hub that folds records has a leader
// term (election revisions start at 1); an older hub's has a record key.
func folded(w *meridianv1.Workload) bool {
	st := w.GetStatus()
	return st.GetDispatchId() != "" && st.GetDispatchTerm() > 0
}

// recordOf rebuilds the Record of w's current dispatch from its status.
// Only for a folded workload (see folded).
func recordOf(w *meridianv1.Workload) *Record {
	r := recordHeadOf(w)
	st := w.GetStatus()
	if len(st.GetAssignment()) > 0 {
		r.Placement = make([]scheduler.PodSetPlacement, 0, len(st.GetAssignment()))
	}
	for _, a := range st.GetAssignment() {
		p := scheduler.PodSetPlacement{PodSet: a.GetPodSet(), MIG: a.GetMigProfile(), Replicas: make([]scheduler.ReplicaPlacement, 0, len(a.GetReplicas()))}
		for _, ra := range a.GetReplicas() {
			rp := scheduler.ReplicaPlacement{Node: ra.GetNode()}
			if len(ra.GetGpus()) > 0 {
				rp.GPUs = make([]int, len(ra.GetGpus()))
				for i, g := range ra.GetGpus() {
					rp.GPUs[i] = int(g)
				}
			}
			p.Replicas = append(p.Replicas, rp)
		}
		r.Placement = append(r.Placement, p)
	}
	return r
}

func decodeRecord(b []byte) (*Record, error) {
	r := &Record{}
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("dispatch record: %w", err)
	}
	if r.DispatchID == "" || r.WorkloadID == "" || r.Cluster == "" {
		return nil, fmt.Errorf("dispatch record: dispatchId, workloadId and cluster are required, got %q %q %q", r.DispatchID, r.WorkloadID, r.Cluster)
	}
	return r, nil
}

func encodeRecord(r *Record) ([]byte, error) { return json.Marshal(r) }

func decodeWorkload(b []byte) (*meridianv1.Workload, error) {
	w := &meridianv1.Workload{}
	if err := protofast.Unmarshal(b, w); err != nil {
		return nil, fmt.Errorf("workload record: %w", err)
	}
	return w, nil
}

// encodeWorkload is the workload's deterministic encoding, the bytes
// proto.MarshalOptions{Deterministic: true} writes.
func encodeWorkload(w *meridianv1.Workload) ([]byte, error) {
	return protofast.MarshalDeterministic(w)
}

// newDispatchID returns a fresh unique dispatch id.
func newDispatchID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return "d-" + hex.EncodeToString(b[:])
}

// hasCondition reports whether w carries a TRUE condition of type typ.
// cancelMessage is the final message of a workload cancelled on request:
// the CancelRequested condition's message, which the API fills with who
// asked and why ("cancelled by user: <reason>"), or fallback when the
// condition carries none.
func cancelMessage(w *meridianv1.Workload, fallback string) string {
	for _, c := range w.GetStatus().GetConditions() {
		if c.GetType() == ConditionCancelRequested && c.GetStatus() == meridianv1.ConditionStatus_CONDITION_STATUS_TRUE && c.GetMessage() != "" {
			return clip(c.GetMessage(), 1024)
		}
	}
	return fallback
}

func hasCondition(w *meridianv1.Workload, typ string) bool {
	for _, c := range w.GetStatus().GetConditions() {
		if c.GetType() == typ && c.GetStatus() == meridianv1.ConditionStatus_CONDITION_STATUS_TRUE {
			return true
		}
	}
	return false
}

// avoided lists the clusters w is backed off from at now, sorted.
func avoided(w *meridianv1.Workload, now time.Time) []string {
	var out []string
	for _, c := range w.GetStatus().GetConditions() {
		if c.GetType() != ConditionClusterBackoff || c.GetStatus() != meridianv1.ConditionStatus_CONDITION_STATUS_TRUE {
			continue
		}
		if c.GetLastTransitionTime() != nil && c.GetLastTransitionTime().AsTime().After(now) {
			out = append(out, c.GetReason())
		}
	}
	return out
}

// rejections counts earlier backoffs from cluster recorded on w.
func rejections(w *meridianv1.Workload, cluster string) int {
	for _, c := range w.GetStatus().GetConditions() {
		if c.GetType() == ConditionClusterBackoff && c.GetReason() == cluster {
			var n int
			if _, err := fmt.Sscanf(c.GetMessage(), "rejections=%d", &n); err == nil {
				return n
			}
			return 1
		}
	}
	return 0
}

// backoffFor is base * 2^(n-1), capped at max.
func backoffFor(n int, base, maxD time.Duration) time.Duration {
	d := base
	for i := 1; i < n && d < maxD; i++ {
		d *= 2
	}
	return min(d, maxD)
}

// clip keeps free text short in status fields.
func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// ConditionPreemptionHold holds a preempted workload back from scheduling
// until its LastTransitionTime; its message counts the preemptions.
const ConditionPreemptionHold = "PreemptionHold"

// preemptions counts the preemptions recorded on w.
func preemptions(w *meridianv1.Workload) int {
	for _, c := range w.GetStatus().GetConditions() {
		if c.GetType() == ConditionPreemptionHold {
			var n int
			if _, err := fmt.Sscanf(c.GetMessage(), "preemptions=%d", &n); err == nil {
				return n
			}
			return 1
		}
	}
	return 0
}

// setPreemptHold records or refreshes the preemption hold on w.
func setPreemptHold(w *meridianv1.Workload, n int, until time.Time) {
	c := &meridianv1.Condition{
		Type: ConditionPreemptionHold, Status: meridianv1.ConditionStatus_CONDITION_STATUS_TRUE, Reason: "Preempted",
		Message:            fmt.Sprintf("preemptions=%d; held until %s", n, until.UTC().Format(time.RFC3339)),
		LastTransitionTime: timestamppb.New(until),
	}
	for i, old := range w.Status.Conditions {
		if old.GetType() == ConditionPreemptionHold {
			w.Status.Conditions[i] = c
			return
		}
	}
	w.Status.Conditions = append(w.Status.Conditions, c)
}

// held reports whether w is held back after a preemption at now.
func held(w *meridianv1.Workload, now time.Time) bool {
	for _, c := range w.GetStatus().GetConditions() {
		if c.GetType() == ConditionPreemptionHold && c.GetLastTransitionTime() != nil {
			return c.GetLastTransitionTime().AsTime().After(now)
		}
	}
	return false
}

// acked reports whether the agent accepted dispatch r: the workload's
// status says so for this dispatch (accept_time, set when the hub applies
// the agent's first answer), or an older hub marked the record.
func acked(r *Record, w *meridianv1.Workload) bool {
	_, ok := ackedAt(r, w)
	return ok
}

// ackedAt is when the hub learned that the agent accepted r, and whether
// it has.
func ackedAt(r *Record, w *meridianv1.Workload) (time.Time, bool) {
	if r.Acked {
		return r.AckedAt, true
	}
	if st := w.GetStatus(); st.GetDispatchId() == r.DispatchID && st.GetAcceptTime() != nil {
		return st.GetAcceptTime().AsTime(), true
	}
	return time.Time{}, false
}
