package scheduler

import (
	"fmt"
	"strings"
	"time"
)

// A Decision records why a dispatch went to its cluster: the clusters the
// core compared (the winner first, then up to two runners-up in the order
// they were ranked) and the rule that decided between them. It is a small
// value with no pointers but the cluster ids, built without allocation on
// the dispatch path; Text and the Score fields are only formatted when the
// caller asks (the hub stores them with the dispatch, Explain shows them).
type Decision struct {
	Rule DecisionRule
	// Clusters[:N] are the clusters compared, the chosen one first.
	Clusters [maxDecisionClusters]ClusterScore
	N        uint8
	// Eligible is how many clusters passed the filters with enough room in
	// total.
	Eligible int32
	// Shadow is the held gang's expected start, for RuleBackfill.
	Shadow time.Time
}

// maxDecisionClusters bounds a decision record: the winner and two more.
const maxDecisionClusters = 3

// DecisionRule names what made the chosen cluster win.
type DecisionRule uint8

const (
	// RuleTightestFit: the gang fit on the cluster it leaves the least free
	// capacity in (tightest first, ties by id), keeping large free blocks
	// elsewhere for large gangs.
	RuleTightestFit DecisionRule = iota + 1
	// RuleOnlyCluster: one cluster passed the filters with enough room.
	RuleOnlyCluster
	// RuleFirstNodeFit: tighter clusters had the room in total but not node
	// by node (topology, fragmentation); the chosen one is the tightest
	// where the whole gang fit.
	RuleFirstNodeFit
	// RuleNominated: the workload preempted work earlier (on the cluster
	// needing the fewest victims) and takes the room that freed.
	RuleNominated
	// RuleBackfill: the workload runs on nodes held for a starving gang
	// because its max_runtime ends before the gang's expected start.
	RuleBackfill
)

func (r DecisionRule) String() string {
	switch r {
	case RuleTightestFit:
		return "tightest fit"
	case RuleOnlyCluster:
		return "only eligible cluster"
	case RuleFirstNodeFit:
		return "tightest cluster where the gang fits node by node"
	case RuleNominated:
		return "nominated after preemption"
	case RuleBackfill:
		return "backfill"
	}
	return ""
}

// ClusterScore is one cluster's standing in a decision.
type ClusterScore struct {
	Cluster string
	// SlackMilli is the GPU capacity (milli-GPUs, in the classes the gang
	// uses) the cluster would have free after the gang: lower is tighter.
	SlackMilli int64
	// Chosen marks the winner.
	Chosen bool
	// Tried is set when the gang was tried node by node there; Placed and
	// Need then say how far the pod set that failed got (Chosen: it fit).
	Tried        bool
	Placed, Need int32
}

// Score is the cluster's score as a number for the API: the GPUs it would
// leave free (lower wins under the tightest-fit rule).
func (c ClusterScore) Score() float64 { return float64(c.SlackMilli) / 1000 }

// Detail says in words how the cluster stood.
func (c ClusterScore) Detail() string {
	left := "leaves " + gpus(c.SlackMilli) + " free"
	switch {
	case c.Chosen:
		return "chosen; " + left
	case c.Tried:
		return fmt.Sprintf("room in total but not node by node (%d of %d replicas); %s", c.Placed, c.Need, left)
	}
	return left
}

// Text is the deciding rule as a sentence, e.g. "tightest fit: leaves 4
// GPUs free on east vs 12 on west".
func (d *Decision) Text() string {
	if d == nil || d.N == 0 {
		return ""
	}
	win := d.Clusters[0]
	var b strings.Builder
	b.WriteString(d.Rule.String())
	switch d.Rule {
	case RuleTightestFit:
		fmt.Fprintf(&b, ": leaves %s free on %s", gpus(win.SlackMilli), win.Cluster)
		var vs []string
		for _, c := range d.Clusters[1:d.N] {
			vs = append(vs, fmt.Sprintf("%s on %s", gpus(c.SlackMilli), c.Cluster))
		}
		if len(vs) > 0 {
			b.WriteString(" vs " + strings.Join(vs, ", "))
		}
	case RuleOnlyCluster:
		fmt.Fprintf(&b, ": %s", win.Cluster)
	case RuleFirstNodeFit:
		var vs []string
		for _, c := range d.Clusters[1:d.N] {
			if c.Tried {
				vs = append(vs, fmt.Sprintf("%s placed %d of %d replicas", c.Cluster, c.Placed, c.Need))
			}
		}
		fmt.Fprintf(&b, ": %s", win.Cluster)
		if len(vs) > 0 {
			b.WriteString("; " + strings.Join(vs, ", "))
		}
	case RuleNominated:
		fmt.Fprintf(&b, ": takes the room its preemptions freed on %s", win.Cluster)
	case RuleBackfill:
		fmt.Fprintf(&b, ": on %s, its max_runtime ends before the held gang's expected start at %s", win.Cluster, d.Shadow.UTC().Format(time.RFC3339))
	}
	if d.Eligible > int32(d.N) {
		fmt.Fprintf(&b, " (%d eligible clusters)", d.Eligible)
	}
	return b.String()
}

// gpus formats milli-GPUs as GPUs: "4 GPUs", "0.5 GPUs", "1 GPU".
func gpus(milli int64) string {
	if milli == 1000 {
		return "1 GPU"
	}
	if milli%1000 == 0 {
		return fmt.Sprintf("%d GPUs", milli/1000)
	}
	return fmt.Sprintf("%.3g GPUs", float64(milli)/1000)
}

// decide builds the decision record of a dispatch to cands[win], with
// cands ranked as eligible ranked them (slack[i] is cands[i]'s slack) and
// tried[i] how far the gang got on each cluster tried before the winner.
func decide(cands []scoredCluster, win int, failed []ClusterScore, nominated bool) Decision {
	d := Decision{Eligible: int32(len(cands))}
	d.Clusters[0] = ClusterScore{Cluster: cands[win].cs.src.ID, SlackMilli: cands[win].slack, Chosen: true, Tried: true}
	d.N = 1
	// Runners-up: first the tighter clusters that failed node by node, then
	// the looser ones after the winner.
	for _, f := range failed {
		if int(d.N) == maxDecisionClusters {
			break
		}
		d.Clusters[d.N] = f
		d.N++
	}
	for i := win + 1; i < len(cands) && int(d.N) < maxDecisionClusters; i++ {
		d.Clusters[d.N] = ClusterScore{Cluster: cands[i].cs.src.ID, SlackMilli: cands[i].slack}
		d.N++
	}
	switch {
	case nominated:
		d.Rule = RuleNominated
	case len(failed) > 0:
		d.Rule = RuleFirstNodeFit
	case len(cands) == 1:
		d.Rule = RuleOnlyCluster
	default:
		d.Rule = RuleTightestFit
	}
	return d
}
