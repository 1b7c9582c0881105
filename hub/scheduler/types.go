package scheduler

import (
	"time"

	"github.com/meridian-gpu/meridian/hub/quota"
	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

// Topology says how close the replicas of one pod set must be.
type Topology uint8

const (
	// TopologyCluster lets replicas land anywhere in the chosen cluster.
	TopologyCluster Topology = iota
	// TopologyRack keeps every replica in one rack.
	TopologyRack
	// TopologyNVLink keeps every replica in one NVLink domain.
	TopologyNVLink
	// TopologySameNode puts every replica on one node.
	TopologySameNode
)

func (t Topology) String() string {
	switch t {
	case TopologyRack:
		return "rack"
	case TopologyNVLink:
		return "NVLink domain"
	case TopologySameNode:
		return "node"
	default:
		return "cluster"
	}
}

// FractionalMode says how a fraction of a GPU may be served. A cluster
// advertises the set it supports as a bit mask.
type FractionalMode uint8

const (
	// FracAny accepts whatever sharing mechanism the cluster offers.
	FracAny FractionalMode = 0
	// FracMPS is CUDA MPS (Slurm mps, HAMi, KAI).
	FracMPS FractionalMode = 1 << iota
	// FracMIG is a hardware-isolated MIG slice.
	FracMIG
	// FracTimeSlice is time-sliced sharing (device-plugin time-slicing, KAI gpu-fraction).
	FracTimeSlice
	// FracMemory is a GPU-memory-limited share (HAMi gpumem).
	FracMemory
	// FracShard is Slurm's shard GRES.
	FracShard
)

// FracModes is a set of fractional modes.
type FracModes uint8

// Has reports whether the set can serve a request that asks for mode m.
// FracAny is served by any non-empty set.
func (s FracModes) Has(m FractionalMode) bool {
	if m == FracAny {
		return s != 0
	}
	return s&FracModes(m) != 0
}

func (m FractionalMode) String() string {
	switch m {
	case FracMPS:
		return "mps"
	case FracMIG:
		return "mig"
	case FracTimeSlice:
		return "time-slice"
	case FracMemory:
		return "memory"
	case FracShard:
		return "shard"
	default:
		return "any"
	}
}

// ClusterState is the hub's view of a cluster's health.
type ClusterState uint8

const (
	// ClusterReady takes new work.
	ClusterReady ClusterState = iota
	// ClusterDraining keeps running work but takes nothing new.
	ClusterDraining
	// ClusterLost has been silent past its timeout.
	ClusterLost
)

// Snapshot is everything the core may look at. Decide never mutates it.
type Snapshot struct {
	// Now is the decision time. The core never reads a clock.
	Now time.Time
	// Queues is the queue tree with quotas. Usage is NOT charged in it: the
	// core charges Running itself, on a clone.
	Queues *quota.Tree
	// Ledger holds decayed usage for fairshare. It may be nil (no history).
	Ledger *quota.Ledger
	// Clusters with their per-node free capacity. Running work's usage is
	// already subtracted from that free capacity, as the agents report it.
	Clusters []Cluster
	// Running are the admitted workloads: they hold quota and may be preempted.
	Running []Running
	// Charged, when set, is Running's usage already summed (the caller
	// keeps it as it changes Running; see RunningCharge). It must equal
	// ChargeOf(Running); nil makes the core sum Running itself.
	Charged *RunningCharge
	// Pending are the workloads waiting for a decision.
	Pending []*Workload
}

// Cluster is one spoke as its agent last advertised it.
type Cluster struct {
	ID     string
	Labels map[string]string
	// Modes is the set of fractional modes the cluster's local plugins serve.
	Modes FracModes
	State ClusterState
	// LastSeen is when the hub last heard the cluster's agent.
	LastSeen time.Time
	Nodes    []Node
}

// Node is one machine: its free resources and where it sits.
type Node struct {
	Name string
	// Rack and NVLink name the node's topology domains. An empty NVLink means
	// the node's GPUs are only linked inside the node.
	Rack   string
	NVLink string
	Res    gpufit.Node
}

// Workload is a gang of pod sets that go to one cluster, whole or not at all.
type Workload struct {
	ID          string
	Queue       string // leaf queue path, tenant/team/project
	Priority    int32
	Preemptible bool
	CreatedAt   time.Time
	// ClusterSelector must match a cluster's labels exactly.
	ClusterSelector map[string]string
	// AvoidClusters lists clusters excluded for now (a recent rejection backoff).
	AvoidClusters []string
	// Nominated is set by the hub for a workload that preempted work in an
	// earlier cycle: it is tried before everything else, so the room its
	// victims free is not taken by someone else.
	Nominated bool
	PodSets   []PodSet
	// MaxRuntime is the most the workload runs once started (0: no limit).
	// Work with a limit may backfill onto nodes held for a gang (reserve.go).
	MaxRuntime time.Duration
}

// PodSet is a group of identical replicas.
type PodSet struct {
	Name string
	// Replicas is the most replicas wanted; MinReplicas > 0 makes it elastic.
	Replicas    int32
	MinReplicas int32
	// Class is the accelerator class every replica needs; "" means any class.
	Class string
	// Req is one replica's resources. Req.MIG names a MIG profile; a
	// fractional request with Mode FracMIG and no Req.MIG is resolved per
	// cluster to the smallest advertised profile that covers it (mig.go).
	Req      gpufit.Request
	Mode     FractionalMode
	Topology Topology
}

// MinSize is the fewest replicas the pod set can run with: MinReplicas for
// an elastic pod set, else all of them.
func (ps *PodSet) MinSize() int32 {
	if ps.MinReplicas <= 0 || ps.MinReplicas > ps.Replicas {
		return ps.Replicas
	}
	return ps.MinReplicas
}

// Running is an admitted workload and where it runs.
type Running struct {
	Workload  *Workload
	Cluster   string
	StartedAt time.Time
	// Usage is the quota it holds, per accelerator class, in milli-GPUs.
	Usage []ClassMilli
	// Placement is where its replicas sit, so that a preemption what-if can
	// return their resources to the nodes.
	Placement []PodSetPlacement
	// Terminating is set when the hub has already asked the cluster to stop
	// the workload (a preemption or cancel in flight). Its resources are
	// about to be free: it is never chosen as a victim again, and a pending
	// workload that fits once they are free waits for them instead of
	// preempting more.
	Terminating bool
}

// ClassMilli is an amount of one accelerator class.
type ClassMilli struct {
	Class string
	Milli int64
}

// PodSetPlacement says where the replicas of one pod set go.
type PodSetPlacement struct {
	PodSet   string
	Replicas []ReplicaPlacement
	// MIG is the MIG profile every replica got, for a MIG pod set: the
	// one it named, or the one a profile-less MIG request resolved to on
	// the chosen cluster (mig.go), as "3g.40gb"; "" otherwise. The
	// connector requests exactly it.
	MIG string `json:"MIG,omitempty"`
}

// ReplicaPlacement is one replica's node and GPU indices: the placement hint.
type ReplicaPlacement struct {
	Node string
	GPUs []int
}

// Plan is the core's decision for one snapshot.
type Plan struct {
	Dispatches  []Dispatch
	Preemptions []Preemption
	Pending     []Pending
	Stats       Stats
}

// Dispatch sends a whole workload to one cluster.
type Dispatch struct {
	WorkloadID string
	Cluster    string
	Placement  []PodSetPlacement
	Usage      []ClassMilli
	// Borrowed is true when the admission uses quota borrowed from siblings,
	// which makes it a reclaim candidate later.
	Borrowed bool
	// Decision records why this cluster won (decision.go).
	Decision Decision
}

// Preemption asks a cluster to stop a running workload, whole.
type Preemption struct {
	WorkloadID string
	Cluster    string
	// For is the pending workload that needs the room.
	For    string
	Reason string
	// Rule says why the victim was chosen, for metrics and logs.
	Rule PreemptRule
}

// PreemptRule is why a victim was chosen.
type PreemptRule uint8

const (
	// PreemptPriority: the victim has a lower priority than the workload
	// that needs its room.
	PreemptPriority PreemptRule = iota
	// PreemptReclaim: the victim borrows quota that the pending workload's
	// queue lent and now wants back.
	PreemptReclaim
)

// String is the rule's metric label: "priority" or "reclaim".
func (r PreemptRule) String() string {
	if r == PreemptReclaim {
		return "reclaim"
	}
	return "priority"
}

// Pending explains why a workload was not dispatched.
type Pending struct {
	WorkloadID string
	Code       ReasonCode
	Reason     string
}

// ReasonCode classifies a pending reason so callers can react (backoff,
// alerting) without parsing text.
type ReasonCode uint8

const (
	// ReasonQuota: the queue or its cohort has no quota left.
	ReasonQuota ReasonCode = iota + 1
	// ReasonNoFit: no eligible cluster has room for the whole gang now.
	ReasonNoFit
	// ReasonNoCluster: no cluster passes the filters at all (selector, class, mode).
	ReasonNoCluster
	// ReasonPreempting: victims were chosen; the workload waits for them to stop.
	ReasonPreempting
	// ReasonInvalid: the workload cannot be scheduled as written (unknown queue).
	ReasonInvalid
	// ReasonDeferred: the cycle's budget ran out before this workload was tried.
	ReasonDeferred
	// ReasonNeverFits: the workload can never run as written, however long it
	// waits: no registered (non-lost) cluster could hold it even if empty (a
	// replica needs more GPUs than the largest node of its class has, a class
	// or fractional mode no cluster has, a gang larger than any cluster or
	// topology domain), or it needs more than its queue could ever hold
	// (nominal + borrowing limit along its ancestors). See neverfits.go.
	ReasonNeverFits
)

func (c ReasonCode) String() string {
	switch c {
	case ReasonQuota:
		return "QuotaExceeded"
	case ReasonNoFit:
		return "NoFit"
	case ReasonNoCluster:
		return "NoEligibleCluster"
	case ReasonPreempting:
		return "WaitingForPreemption"
	case ReasonInvalid:
		return "Invalid"
	case ReasonDeferred:
		return "Deferred"
	case ReasonNeverFits:
		return "NeverFits"
	}
	return "Unknown"
}

// Stats counts what one Plan call did.
type Stats struct {
	Considered  int
	Dispatched  int
	Preemptions int
	// Placements counts replicas placed (the unit of "placement decisions").
	Placements int
}

// Config tunes the core. The zero value is not valid; use DefaultConfig.
type Config struct {
	// StaleAfter excludes clusters not heard from for this long.
	StaleAfter time.Duration
	// Policy names the node scorer when Scorer is nil: "meridian" (the
	// default: fragmentation gradient against the shapes pending now) or
	// "bestfit".
	Policy string
	// Scorer, when set, ranks nodes for a replica instead of Policy.
	Scorer gpufit.Scorer
	// Target, when set and not empty, is the shape mix the meridian
	// policy measures fragmentation against: the decayed history of
	// submitted shapes (ShapeHistory.Target). Nil falls back to the shapes
	// pending in the snapshot.
	Target *gpufit.TargetWorkload
	// NodeCandidates is how many fitting nodes, tightest first, the scorer
	// compares per replica at least. Scores are remembered by node state,
	// so the cost is mostly the scan.
	NodeCandidates int
	// CandidateBudget spreads more candidates over a cycle with few
	// pending replicas: each replica may compare CandidateBudget / pending
	// replicas nodes, between NodeCandidates and MaxNodeCandidates. A
	// live hub's cycles hold tens or hundreds of workloads and get the
	// full view; a cycle of 100,000 keeps its cost bounded. 0 disables it.
	CandidateBudget int
	// MaxNodeCandidates caps the per-replica count CandidateBudget gives.
	MaxNodeCandidates int
	// PartialFirst makes a fractional replica consider only nodes with a
	// partly used GPU while any of them fits. Off: it cost 0.1-0.4 points
	// of allocation on the OpenB trace, since the scorer already weighs
	// what a fraction does to a whole GPU. Kept for the ablation.
	PartialFirst bool
	// ExactFit takes, without scoring, the first node whose whole free GPUs
	// a whole-GPU replica would use up exactly. Off, for the same reason:
	// the scorer may rightly prefer a node whose CPU the exact fit would
	// leave stranded. Kept for the ablation.
	ExactFit bool
	// ClusterCandidates is how many clusters, best first, a gang is tried on.
	ClusterCandidates int
	// MaxPreemptionAttempts bounds preemption searches per Plan call.
	MaxPreemptionAttempts int
	// NominalFirst admits, in each cycle, all work that fits its queue's own
	// nominal quota before any work that borrows (Kueue's order). Off by
	// default: in the contention benchmark it starves large gangs of
	// under-served teams behind small borrowed work (shares 4-5 points off
	// their weights, against under 1 point without it); see
	// docs/design/scheduling-core.md.
	NominalFirst bool
	// MaxConsidered bounds how many pending workloads one Plan call tries; the
	// rest are Deferred. 0 means no bound.
	MaxConsidered int
	// Scratch, when set, is memory Decide reuses from one call to the next
	// instead of allocating it anew: the working copies of the clusters.
	// It never changes a plan. One caller at a time: the dispatch loop
	// keeps one for its cycles.
	Scratch *Scratch
}

// Scratch is the memory of a Decide call that the next call may reuse
// (Config.Scratch). The zero value is ready. A working copy of every
// cluster, rebuilt each call, was the largest allocation of a dispatch
// cycle: at 2,000 workloads/s, a twentieth of all the hub allocated.
type Scratch struct {
	clusters []*clusterState
}

// cluster is the reusable working copy for the snapshot's i-th cluster.
func (s *Scratch) cluster(i int) *clusterState {
	if s == nil {
		return nil
	}
	for len(s.clusters) <= i {
		s.clusters = append(s.clusters, &clusterState{})
	}
	return s.clusters[i]
}

// Node scoring policies.
const (
	PolicyMeridian = "meridian"
	PolicyBestFit  = "bestfit"
)

// DefaultConfig returns the settings the hub runs with.
func DefaultConfig() Config {
	return Config{
		StaleAfter:            30 * time.Second,
		Policy:                PolicyMeridian,
		NodeCandidates:        64,
		CandidateBudget:       4 << 20,
		MaxNodeCandidates:     1024,
		ClusterCandidates:     4,
		MaxPreemptionAttempts: 64,
	}
}
