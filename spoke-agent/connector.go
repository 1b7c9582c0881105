package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// Connector is the agent's only view of the cluster it serves. A connector
// wraps one backend (the in-memory simcluster, Slurm, Kubernetes) and
// translates dispatches into that backend's jobs or pods.
//
// The agent is the only caller. Its dispatch consumer calls Launch and
// Cancel for up to Config.LaunchParallelism different dispatch ids at the
// same time, never two calls for one dispatch id at once (a cancel waits
// for the launch it cancels). Inventory and List run from the advertise
// and reconcile loops at any time. Every method must be safe for
// concurrent use, and two concurrent Launches must not both take the same
// free capacity.
//
// Optional abilities are separate interfaces that the agent finds by type
// assertion (see Vanisher).
type Connector interface {
	// Kind names the backend: "simcluster", "slurm" or "kubernetes".
	Kind() string

	// Inventory returns the cluster's capacity now: every node with its
	// GPUs (free milli and free memory per GPU), topology (rack, NVLink
	// domain), labels, and the fractional modes the cluster supports. It
	// may block on the backend's API and must honour ctx. The returned
	// Inventory belongs to the caller, but its nodes are read-only: a
	// connector may return the very *Node it returned before for a node
	// that has not changed (the agent then compares it at no cost), and
	// it never changes a node once returned.
	Inventory(ctx context.Context) (*Inventory, error)

	// Launch starts the workload of d on the cluster, preferring d's
	// placement hint. It is IDEMPOTENT, keyed on d.DispatchId: a second
	// call for a dispatch id the connector already knows (running or
	// finished) is a no-op that returns nil, so a redelivered dispatch is
	// never launched twice.
	//
	// When the cluster cannot take the work (it no longer fits, the
	// accelerator class or fractional mode is missing), Launch returns an
	// error for which IsRejected is true, made with Reject; the agent then
	// reports REJECTED with its reason. Any other error is a fault: the
	// agent retries the dispatch later. Launch may block while the backend
	// accepts the job, but it must return once the job is submitted (not
	// when it finishes), and it must never block on the Events channel.
	Launch(ctx context.Context, d *agentv1.Dispatch) error

	// Cancel stops a dispatch's work. preempt says whether the hub preempts
	// it (the connector reports StatePreempted) or cancels it
	// (StateCancelled). A dispatch that is unknown or already finished is
	// not an error: Cancel returns nil. It is idempotent and may block
	// until the backend has been asked to stop the work (not until the work
	// has stopped); the final state arrives on Events.
	Cancel(ctx context.Context, dispatchID string, preempt bool) error

	// List returns everything this connector launched and still remembers,
	// running or finished, rebuilt from the cluster itself (labels,
	// annotations, job comments) so that it survives an agent restart. It
	// may block on the backend's API.
	List(ctx context.Context) ([]WorkStatus, error)

	// Events delivers state changes of launched work, in order per
	// dispatch: StateRunning once all required replicas run, then one
	// terminal state. The channel is the same on every call and is read by
	// one goroutine of the agent. A connector must buffer rather than drop
	// events when the agent reads slowly.
	Events() <-chan WorkEvent
}

// Vanisher is an optional ability, used by test connectors: while Vanished
// reports true the agent behaves as if the cluster had lost its network. It
// sends no heartbeats, advertisements or events, and it leaves dispatches
// unacknowledged. Work keeps running; held events are sent once it returns.
type Vanisher interface {
	Vanished() bool
}

// Inventory is a cluster's capacity as the connector sees it.
type Inventory struct {
	// Labels of the cluster, matched by workloads' cluster selectors.
	Labels map[string]string
	// FractionalModes the cluster's device plugins support.
	FractionalModes []meridianv1.FractionalMode
	// MIGStrategy says how the cluster exposes MIG GPUs (the GPUs that list
	// mig_profiles); unspecified reads as mixed.
	MIGStrategy agentv1.MigStrategy
	// Nodes, sorted by name, with free and total capacity.
	Nodes []*agentv1.Node
}

// WorkState is where a launched dispatch stands on the cluster.
type WorkState int

// Work states. Succeeded, Failed, Preempted and Cancelled are terminal.
const (
	StateUnknown WorkState = iota
	StatePending
	StateRunning
	StateSucceeded
	StateFailed
	StatePreempted
	StateCancelled
)

var stateNames = [...]string{"Unknown", "Pending", "Running", "Succeeded", "Failed", "Preempted", "Cancelled"}

func (s WorkState) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("WorkState(%d)", int(s))
}

// Terminal reports whether s is a final state.
func (s WorkState) Terminal() bool { return s >= StateSucceeded }

// WorkStatus is one dispatch as the connector knows it (see Connector.List).
type WorkStatus struct {
	DispatchID string
	WorkloadID string
	State      WorkState
	// Nodes the replicas were placed on, in pod set and replica order.
	Nodes []string
	// StartedAt is when the work started running; zero if it has not.
	StartedAt time.Time
	// FinishedAt is when the work reached a terminal state; zero if not.
	FinishedAt time.Time
	// ExitCode of the main process for terminal states, when known.
	ExitCode *int32
	// Reason explains a Failed, Preempted or Cancelled state.
	Reason string
	// GPUMilliSeconds consumed so far.
	GPUMilliSeconds int64
}

// WorkEvent is one state change of launched work (see Connector.Events).
type WorkEvent struct {
	DispatchID string
	WorkloadID string
	State      WorkState
	Time       time.Time
	ExitCode   *int32
	Reason     string
	// GPUMilliSeconds consumed so far (final for terminal states).
	GPUMilliSeconds int64
	// WallTime since the work started running.
	WallTime time.Duration
}

// ErrRejected is wrapped by every error Reject returns.
var ErrRejected = errors.New("dispatch rejected")

// RejectError says why a cluster refuses a dispatch.
type RejectError struct{ Reason string }

func (e *RejectError) Error() string { return "dispatch rejected: " + e.Reason }

// Unwrap lets errors.Is(err, ErrRejected) match.
func (e *RejectError) Unwrap() error { return ErrRejected }

// Reject returns the error a Connector's Launch uses to refuse a dispatch.
func Reject(format string, args ...any) error {
	return &RejectError{Reason: fmt.Sprintf(format, args...)}
}

// IsRejected reports whether err (or an error it wraps) is a rejection.
func IsRejected(err error) bool { return errors.Is(err, ErrRejected) }

// RejectReason returns the reason of a rejection, or err's text.
func RejectReason(err error) string {
	var re *RejectError
	if errors.As(err, &re) {
		return re.Reason
	}
	if err == nil {
		return ""
	}
	return err.Error()
}
