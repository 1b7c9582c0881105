package scheduler

import (
	"fmt"
	"strconv"
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

// Detail says in words how the cluster stood. (Built by appending, not
// with fmt: every dispatch stores one per cluster compared.)
func (c ClusterScore) Detail() string {
	var buf [96]byte // on the stack: only the string is allocated
	b := buf[:0]
	switch {
	case c.Chosen:
		b = append(b, "chosen; "...)
	case c.Tried:
		b = append(b, "room in total but not node by node ("...)
		b = strconv.AppendInt(b, int64(c.Placed), 10)
		b = append(b, " of "...)
		b = strconv.AppendInt(b, int64(c.Need), 10)
		b = append(b, " replicas); "...)
	}
	b = append(b, "leaves "...)
	b = appendGPUs(b, c.SlackMilli)
	b = append(b, " free"...)
	return string(b)
}

// Text is the deciding rule as a sentence, e.g. "tightest fit: leaves 4
// GPUs free on east vs 12 on west". The common rules are built by
// appending, not with fmt: every dispatch stores one.
func (d *Decision) Text() string {
	if d == nil || d.N == 0 {
		return ""
	}
	win := d.Clusters[0]
	var buf [192]byte // on the stack: only the string is allocated
	b := buf[:0]
	b = append(b, d.Rule.String()...)
	switch d.Rule {
	case RuleTightestFit:
		b = append(b, ": leaves "...)
		b = appendGPUs(b, win.SlackMilli)
		b = append(b, " free on "...)
		b = append(b, win.Cluster...)
		for i, c := range d.Clusters[1:d.N] {
			if i == 0 {
				b = append(b, " vs "...)
			} else {
				b = append(b, ", "...)
			}
			b = appendGPUs(b, c.SlackMilli)
			b = append(b, " on "...)
			b = append(b, c.Cluster...)
		}
	case RuleOnlyCluster:
		b = append(b, ": "...)
		b = append(b, win.Cluster...)
	case RuleFirstNodeFit:
		var vs []string
		for _, c := range d.Clusters[1:d.N] {
			if c.Tried {
				vs = append(vs, fmt.Sprintf("%s placed %d of %d replicas", c.Cluster, c.Placed, c.Need))
			}
		}
		b = append(b, ": "...)
		b = append(b, win.Cluster...)
		if len(vs) > 0 {
			b = append(b, "; "+strings.Join(vs, ", ")...)
		}
	case RuleNominated:
		b = fmt.Appendf(b, ": takes the room its preemptions freed on %s", win.Cluster)
	case RuleBackfill:
		b = fmt.Appendf(b, ": on %s, its max_runtime ends before the held gang's expected start at %s", win.Cluster, d.Shadow.UTC().Format(time.RFC3339))
	}
	if d.Eligible > int32(d.N) {
		b = append(b, " ("...)
		b = strconv.AppendInt(b, int64(d.Eligible), 10)
		b = append(b, " eligible clusters)"...)
	}
	return string(b)
}

// gpus formats milli-GPUs as GPUs: "4 GPUs", "0.5 GPUs", "1 GPU".
func gpus(milli int64) string { return string(appendGPUs(nil, milli)) }

// appendGPUs appends gpus(milli) to b.
func appendGPUs(b []byte, milli int64) []byte {
	switch {
	case milli == 1000:
		return append(b, "1 GPU"...)
	case milli%1000 == 0:
		b = strconv.AppendInt(b, milli/1000, 10)
	default:
		b = strconv.AppendFloat(b, float64(milli)/1000, 'g', 3, 64) // as fmt's %.3g
	}
	return append(b, " GPUs"...)
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
