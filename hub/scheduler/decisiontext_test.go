package scheduler

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The decision texts are built by appending for speed; these are the
// fmt-based originals they must match word for word.

// refDetail is Detail as first written.
func refDetail(c ClusterScore) string {
	left := "leaves " + refGPUs(c.SlackMilli) + " free"
	switch {
	case c.Chosen:
		return "chosen; " + left
	case c.Tried:
		return fmt.Sprintf("room in total but not node by node (%d of %d replicas); %s", c.Placed, c.Need, left)
	}
	return left
}

// refText is Text as first written.
func refText(d *Decision) string {
	if d == nil || d.N == 0 {
		return ""
	}
	win := d.Clusters[0]
	var b strings.Builder
	b.WriteString(d.Rule.String())
	switch d.Rule {
	case RuleTightestFit:
		fmt.Fprintf(&b, ": leaves %s free on %s", refGPUs(win.SlackMilli), win.Cluster)
		var vs []string
		for _, c := range d.Clusters[1:d.N] {
			vs = append(vs, fmt.Sprintf("%s on %s", refGPUs(c.SlackMilli), c.Cluster))
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

// refGPUs is gpus as first written.
func refGPUs(milli int64) string {
	if milli == 1000 {
		return "1 GPU"
	}
	if milli%1000 == 0 {
		return fmt.Sprintf("%d GPUs", milli/1000)
	}
	return fmt.Sprintf("%.3g GPUs", float64(milli)/1000)
}

// TestDecisionTextsMatchTheirReference: Text and Detail read exactly as the
// fmt-based originals for any rule, slack (whole, fractional, zero,
// negative), cluster count and eligibility.
func TestDecisionTextsMatchTheirReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		d := &Decision{Rule: DecisionRule(rapid.IntRange(0, 6).Draw(t, "rule")), N: uint8(rapid.IntRange(0, maxDecisionClusters).Draw(t, "n")),
			Shadow: t0.Add(time.Duration(rapid.IntRange(0, 3600).Draw(t, "shadow")) * time.Second)}
		d.Eligible = int32(d.N) + int32(rapid.IntRange(0, 2).Draw(t, "more"))*int32(rapid.IntRange(0, 40).Draw(t, "extra"))
		for i := range d.Clusters {
			d.Clusters[i] = ClusterScore{
				Cluster:    rapid.SampledFrom([]string{"east", "west", "c-3", ""}).Draw(t, "cluster"),
				SlackMilli: rapid.SampledFrom([]int64{0, 1000, 2000, 250, 1500, 12345, -500, 80000, 1}).Draw(t, "slack"),
				Chosen:     i == 0, Tried: rapid.Bool().Draw(t, "tried"),
				Placed: int32(rapid.IntRange(0, 8).Draw(t, "placed")), Need: int32(rapid.IntRange(0, 8).Draw(t, "need")),
			}
			if rapid.Bool().Draw(t, "unchosen") {
				d.Clusters[i].Chosen = false
			}
			if got, want := d.Clusters[i].Detail(), refDetail(d.Clusters[i]); got != want {
				t.Fatalf("Detail %q, want %q", got, want)
			}
		}
		if got, want := d.Text(), refText(d); got != want {
			t.Fatalf("Text %q, want %q", got, want)
		}
	})
}
