package scheduler

import (
	"strings"
	"testing"
)

func TestDecisionRecord(t *testing.T) {
	tree := queues(h100, map[string]int64{"a": 1000})
	cases := []struct {
		name      string
		clusters  []Cluster
		w         *Workload
		cluster   string
		rule      DecisionRule
		compared  []string // clusters in the record, winner first
		textHas   []string
		firstSlot ClusterScore
	}{
		{
			name: "tightest fit among three",
			clusters: []Cluster{
				makeCluster("east").Nodes(4, 8, h100, 0, 0).Obj(), // 32 free
				makeCluster("north").Nodes(1, 8, h100, 0, 0).Obj(),
				makeCluster("west").Nodes(2, 8, h100, 0, 0).Obj(), // 16 free
			},
			w:        makeWorkload("w", "t/a").PodSet("main", 1, 4, 1000, h100).Obj(),
			cluster:  "north",
			rule:     RuleTightestFit,
			compared: []string{"north", "west", "east"},
			textHas:  []string{"tightest fit: leaves 4 GPUs free on north vs 12 GPUs on west, 28 GPUs on east"},
		},
		{
			name:     "only cluster",
			clusters: []Cluster{makeCluster("east").Nodes(2, 8, h100, 0, 0).Obj(), makeCluster("west").Nodes(2, 8, a100, 0, 0).Obj()},
			w:        makeWorkload("w", "t/a").PodSet("main", 1, 8, 1000, h100).Obj(),
			cluster:  "east",
			rule:     RuleOnlyCluster,
			compared: []string{"east"},
			textHas:  []string{"only eligible cluster: east"},
		},
		{
			name: "tighter cluster fails node by node",
			clusters: []Cluster{
				// tight has 8 GPUs free, but as 4 + 4 on two nodes: an
				// 8-GPU replica does not fit.
				func() Cluster {
					c := makeCluster("tight").Nodes(2, 8, h100, 0, 0).Obj()
					c.Nodes[0].Res.GPUs = append(c.Nodes[0].Res.GPUs[:0:0], c.Nodes[0].Res.GPUs...)
					c.Nodes[1].Res.GPUs = append(c.Nodes[1].Res.GPUs[:0:0], c.Nodes[1].Res.GPUs...)
					for g := 0; g < 4; g++ {
						c.Nodes[0].Res.GPUs[g].FreeMilli = 0
						c.Nodes[1].Res.GPUs[g].FreeMilli = 0
					}
					return c
				}(),
				makeCluster("roomy").Nodes(3, 8, h100, 0, 0).Obj(),
			},
			w:        makeWorkload("w", "t/a").PodSet("main", 1, 8, 1000, h100).Obj(),
			cluster:  "roomy",
			rule:     RuleFirstNodeFit,
			compared: []string{"roomy", "tight"},
			textHas:  []string{"tight placed 0 of 1 replicas"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := Decide(snapshot(tree, tc.clusters, tc.w), DefaultConfig())
			if len(p.Dispatches) != 1 {
				t.Fatalf("plan = %+v, want one dispatch", p)
			}
			d := p.Dispatches[0].Decision
			if p.Dispatches[0].Cluster != tc.cluster || d.Rule != tc.rule {
				t.Fatalf("dispatched to %s by rule %v, want %s by %v", p.Dispatches[0].Cluster, d.Rule, tc.cluster, tc.rule)
			}
			var got []string
			for _, c := range d.Clusters[:d.N] {
				got = append(got, c.Cluster)
			}
			if strings.Join(got, ",") != strings.Join(tc.compared, ",") {
				t.Fatalf("compared %v, want %v", got, tc.compared)
			}
			if !d.Clusters[0].Chosen || d.Clusters[0].Cluster != p.Dispatches[0].Cluster {
				t.Fatalf("first entry %+v is not the chosen cluster", d.Clusters[0])
			}
			text := d.Text()
			for _, s := range tc.textHas {
				if !strings.Contains(text, s) {
					t.Errorf("decision text %q lacks %q", text, s)
				}
			}
			if len(text) > 300 {
				t.Errorf("decision text is %d bytes, want it small", len(text))
			}
		})
	}
}

func TestDecisionRecordForNominatedWorkload(t *testing.T) {
	w := makeWorkload("w", "t/a").PodSet("main", 1, 8, 1000, h100).Obj()
	w.Nominated = true
	p := Decide(snapshot(queues(h100, map[string]int64{"a": 100}), []Cluster{makeCluster("east").Nodes(1, 8, h100, 0, 0).Obj()}, w), DefaultConfig())
	if len(p.Dispatches) != 1 || p.Dispatches[0].Decision.Rule != RuleNominated {
		t.Fatalf("plan = %+v, want one dispatch decided by RuleNominated", p.Dispatches)
	}
	if got := p.Dispatches[0].Decision.Text(); !strings.Contains(got, "preemptions freed on east") {
		t.Fatalf("text = %q", got)
	}
}

// Cross-cluster preemption: among the clusters where preemption could make
// room, the one needing the fewest victims wins, whatever the cluster order.
func TestPreemptionChoosesClusterWithFewestVictims(t *testing.T) {
	// Each cluster has two 8-GPU nodes, all busy with low-priority work.
	// east: each node holds two 4-GPU jobs (2 victims free a node);
	// west: each node holds one 8-GPU job (1 victim); south: 8 x 1-GPU jobs.
	type layout struct {
		cluster string
		perNode int // jobs per node
	}
	cases := []struct {
		name    string
		layouts []layout
		want    string
		victims int
		others  string
	}{
		{"west needs one", []layout{{"east", 2}, {"south", 8}, {"west", 1}}, "west", 1, "(fewest victims: 1 vs 2 on east, 8 on south)"},
		{"east needs two", []layout{{"east", 2}, {"west", 4}}, "east", 2, "(fewest victims: 2 vs 4 on west)"},
		{"only one cluster can", []layout{{"east", 8}}, "east", 8, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var clusters []Cluster
			var run []Running
			for _, l := range tc.layouts {
				c := makeCluster(l.cluster).Nodes(2, 8, h100, 0, 0).Obj()
				per := 8 / l.perNode
				for n := 0; n < 2; n++ {
					for j := 0; j < l.perNode; j++ {
						w := makeWorkload(l.cluster+"-low-"+string(rune('a'+n))+string(rune('a'+j)), "t/a").PodSet("main", 1, int32(per), 1000, h100).Priority(1).Obj()
						gs := make([]int, per)
						for g := range gs {
							gs[g] = j*per + g
						}
						pl := []PodSetPlacement{{PodSet: "main", Replicas: []ReplicaPlacement{{Node: c.Nodes[n].Name, GPUs: gs}}}}
						run = append(run, running(w, &c, pl, t0))
					}
				}
				clusters = append(clusters, c)
			}
			high := makeWorkload("high", "t/a").PodSet("main", 1, 8, 1000, h100).Priority(10).Obj()
			s := snapshot(queues(h100, map[string]int64{"a": 1000}), clusters, high)
			s.Running = run
			p := Decide(s, DefaultConfig())
			if len(p.Preemptions) != tc.victims {
				t.Fatalf("preemptions = %+v, want %d", p.Preemptions, tc.victims)
			}
			for _, v := range p.Preemptions {
				if v.Cluster != tc.want {
					t.Fatalf("victim %s on %s, want every victim on %s", v.WorkloadID, v.Cluster, tc.want)
				}
			}
			pe := pendingOf(p, "high")
			if pe == nil || pe.Code != ReasonPreempting || !strings.Contains(pe.Reason, "then runs on "+tc.want) {
				t.Fatalf("high pending = %+v", pe)
			}
			if tc.others != "" && !strings.Contains(pe.Reason, tc.others) {
				t.Fatalf("reason %q lacks the rule %q", pe.Reason, tc.others)
			}
			if tc.others == "" && strings.Contains(pe.Reason, "fewest victims") {
				t.Fatalf("reason %q names a rule with nothing to compare", pe.Reason)
			}
		})
	}
}
