package faults

import (
	"math/rand/v2"
	"time"
)

// Kind is a kind of fault.
type Kind string

// The fault kinds.
const (
	HubKill        Kind = "hub-kill"         // SIGKILL the leader hub, restart it
	HubPause       Kind = "hub-pause"        // SIGSTOP the leader hub past its lease, SIGCONT
	HubsRestartAll Kind = "hubs-restart-all" // SIGKILL every hub, start them all again
	EtcdMemberKill Kind = "etcd-member-kill" // SIGKILL an etcd follower, restart it on its data
	EtcdLeaderKill Kind = "etcd-leader-kill" // SIGKILL the etcd leader, restart it on its data
	NATSKill       Kind = "nats-kill"        // SIGKILL a NATS node, restart it on its store
	AgentStopShort Kind = "agent-stop-short" // SIGSTOP an agent for less than the cluster timeout
	AgentStopLong  Kind = "agent-stop-long"  // SIGSTOP an agent past the cluster timeout (LOST)
	AgentCut       Kind = "agent-cut"        // cut a running agent off from NATS past the cluster timeout (LOST)
	AgentSlow      Kind = "agent-slow"       // delay an agent's NATS traffic (200 to 500 ms each way)
)

// AllKinds lists every kind, in a fixed order.
func AllKinds() []Kind {
	return []Kind{HubKill, HubPause, HubsRestartAll, EtcdMemberKill, EtcdLeaderKill, NATSKill, AgentStopShort, AgentStopLong, AgentCut, AgentSlow}
}

// NeedsProxies reports whether the kind needs a proxy between agents and
// NATS (topology.Config.AgentProxies).
func (k Kind) NeedsProxies() bool { return k == AgentCut || k == AgentSlow }

// LeaderKinds are the faults that take the leader hub away; failover is
// measured after each.
func (k Kind) Leader() bool { return k == HubKill || k == HubPause || k == HubsRestartAll }

// Fault is one planned fault.
type Fault struct {
	Kind Kind
	// At is when to inject it, from the start of the schedule.
	At time.Duration
	// Hold is how long the process stays down or paused.
	Hold time.Duration
	// Pick chooses among several candidates (an etcd follower, a NATS
	// node, an agent): candidate Pick modulo their number.
	Pick int
}

// PlanConfig says what to plan.
type PlanConfig struct {
	Seed uint64
	// Span is the time faults may take; none starts after Span minus its
	// own length.
	Span time.Duration
	// LeaderTTL and ClusterTimeout are the hubs'; pauses are sized from
	// them.
	LeaderTTL, ClusterTimeout time.Duration
	// Kinds to draw from; nil means AllKinds.
	Kinds []Kind
	// Gap bounds the quiet time between two faults (uniform); zero means
	// 4 s to 8 s.
	MinGap, MaxGap time.Duration
}

// Budget is the time a fault is expected to take, hold and recovery.
func (f Fault) Budget() time.Duration {
	switch f.Kind {
	case HubKill, HubsRestartAll, EtcdMemberKill, EtcdLeaderKill, NATSKill:
		return f.Hold + 5*time.Second // restart and readiness
	}
	return f.Hold
}

// Plan draws faults one after another: every round is a permutation of
// the kinds, so each kind comes once per round, in an order from the seed.
// The same config always gives the same plan.
func Plan(c PlanConfig) []Fault {
	r := rand.New(rand.NewPCG(c.Seed, 0xfa017))
	kinds := c.Kinds
	if len(kinds) == 0 {
		kinds = AllKinds()
	}
	minGap, maxGap := c.MinGap, c.MaxGap
	if minGap <= 0 {
		minGap = 4 * time.Second
	}
	if maxGap < minGap {
		maxGap = minGap + 4*time.Second
	}
	span := func(lo, hi time.Duration) time.Duration {
		return (lo + time.Duration(r.Int64N(int64(hi-lo)+1))).Round(100 * time.Millisecond)
	}
	var out []Fault
	at := span(minGap, maxGap)
	for {
		order := r.Perm(len(kinds))
		for _, i := range order {
			f := Fault{Kind: kinds[i], Pick: r.IntN(1 << 16)}
			switch f.Kind {
			case HubKill, HubsRestartAll, EtcdMemberKill, EtcdLeaderKill, NATSKill:
				f.Hold = span(time.Second, 5*time.Second)
			case HubPause:
				f.Hold = c.LeaderTTL + span(2*time.Second, 5*time.Second)
			case AgentStopShort:
				f.Hold = span(c.ClusterTimeout/4, c.ClusterTimeout/2)
			case AgentStopLong, AgentCut:
				f.Hold = c.ClusterTimeout + span(3*time.Second, 8*time.Second)
			case AgentSlow:
				f.Hold = span(5*time.Second, 10*time.Second)
			}
			f.At = at
			if at+f.Budget() > c.Span {
				return out
			}
			out = append(out, f)
			at += f.Budget() + span(minGap, maxGap)
		}
	}
}
