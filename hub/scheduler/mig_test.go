package scheduler

import (
	"fmt"
	"strings"
	"testing"

	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

// mig is one profile's free instances on a MIG GPU, for migGPU.
type mig struct {
	profile string
	free    int32
}

// MIGNode adds a node of class whose GPUs are MIG GPUs, one per layout,
// with freeMilli compute share free each (0 = the free instances' slices).
func (b *clusterBuilder) MIGNode(class string, freeMilli int32, layouts ...[]mig) *clusterBuilder {
	node := Node{Name: fmt.Sprintf("%s-n%03d", b.c.ID, len(b.c.Nodes)), Res: gpufit.Node{
		Class: class, CPUMilliFree: 128000, MemMiBFree: 1 << 20,
	}}
	for _, l := range layouts {
		var m gpufit.MIGGPU
		slices := 0
		for _, s := range l {
			p, err := gpufit.ParseMIGProfile(s.profile)
			if err != nil {
				panic(err)
			}
			m.Slots = append(m.Slots, gpufit.MIGSlot{Profile: p, Free: s.free})
			slices += int(p.Slices) * int(s.free)
		}
		f := freeMilli
		if f == 0 {
			f = int32(min(1000, slices*1000/7))
		}
		node.Res.MIG = append(node.Res.MIG, m)
		node.Res.GPUs = append(node.Res.GPUs, gpufit.GPU{FreeMilli: f, FreeMemMiB: 81920, TotalMemMiB: 81920, MIG: int32(len(node.Res.MIG))})
	}
	b.c.Nodes = append(b.c.Nodes, node)
	return b
}

// MIG makes the last pod set ask for one instance of profile.
func (b *workloadBuilder) MIG(profile string) *workloadBuilder {
	p, err := gpufit.ParseMIGProfile(profile)
	if err != nil {
		panic(err)
	}
	ps := b.last()
	ps.Mode = FracMIG
	ps.Req.GPUs, ps.Req.Milli, ps.Req.GPUMemMiB, ps.Req.MIG = 1, p.Milli(), 0, p
	return b
}

func TestPlanMIG(t *testing.T) {
	q := queues(h100, map[string]int64{"a": 100})
	ones := []mig{{"1g.10gb", 7}}
	tests := []struct {
		name     string
		clusters []Cluster
		pending  []*Workload
		dispatch map[string]string // workload -> cluster ("" = pending)
		mig      map[string]string // workload -> profile in the placement
		reason   map[string]string // workload -> part of its pending reason
		usage    map[string]int64  // workload -> milli charged
	}{
		{
			name: "a 3g request goes where a 3g slice is free, not where only 1g slices are",
			clusters: []Cluster{
				makeCluster("east").Modes(FracMIG).MIGNode(h100, 0, ones, ones).Obj(),
				makeCluster("west").Modes(FracMIG).MIGNode(h100, 0, []mig{{"3g.40gb", 1}, {"4g.40gb", 1}}).Obj(),
			},
			pending:  []*Workload{makeWorkload("w", "t/a").PodSet("main", 1, 1, 0, h100).MIG("3g.40gb").Obj()},
			dispatch: map[string]string{"w": "west"},
			mig:      map[string]string{"w": "3g.40gb"},
			usage:    map[string]int64{"w": 428},
		},
		{
			name:     "a 3g request waits when only 1g slices exist",
			clusters: []Cluster{makeCluster("east").Modes(FracMIG).MIGNode(h100, 0, ones, ones).Obj()},
			pending:  []*Workload{makeWorkload("w", "t/a").PodSet("main", 1, 1, 0, h100).MIG("3g.40gb").Obj()},
			dispatch: map[string]string{"w": ""},
			reason:   map[string]string{"w": "no MIG 3g.40gb instances"},
		},
		{
			name: "a 3g request waits when its slices are all taken",
			clusters: []Cluster{makeCluster("east").Modes(FracMIG).
				MIGNode(h100, 571, []mig{{"3g.40gb", 0}, {"4g.40gb", 1}}).Obj()},
			pending:  []*Workload{makeWorkload("w", "t/a").PodSet("main", 1, 1, 0, h100).MIG("3g.40gb").Obj()},
			dispatch: map[string]string{"w": ""},
			reason:   map[string]string{"w": "NoFit"},
		},
		{
			name: "a MIG profile never lands on a plain GPU",
			clusters: []Cluster{
				makeCluster("east").Modes(FracMIG).Nodes(1, 8, h100, 0, 0).Obj(),
			},
			pending:  []*Workload{makeWorkload("w", "t/a").PodSet("main", 1, 1, 0, h100).MIG("1g.10gb").Obj()},
			dispatch: map[string]string{"w": ""},
			reason:   map[string]string{"w": "MIG 1g.10gb"},
		},
		{
			name: "whole GPUs and other fractions never land on a MIG GPU",
			clusters: []Cluster{
				makeCluster("east").Modes(FracMIG, FracMPS).MIGNode(h100, 1000, ones).Obj(),
			},
			pending: []*Workload{
				makeWorkload("whole", "t/a").PodSet("main", 1, 1, 1000, h100).Obj(),
				makeWorkload("mps", "t/a").PodSet("main", 1, 1, 200, h100).Mode(FracMPS).Obj(),
			},
			dispatch: map[string]string{"whole": "", "mps": ""},
		},
		{
			name: "instance counts hold within one cycle",
			clusters: []Cluster{makeCluster("east").Modes(FracMIG).
				MIGNode(h100, 0, []mig{{"3g.40gb", 2}}).Obj()},
			pending: []*Workload{
				makeWorkload("w1", "t/a").PodSet("main", 1, 1, 0, h100).MIG("3g.40gb").Obj(),
				makeWorkload("w2", "t/a").PodSet("main", 1, 1, 0, h100).MIG("3g.40gb").Created(t0.Add(1)).Obj(),
				makeWorkload("w3", "t/a").PodSet("main", 1, 1, 0, h100).MIG("3g.40gb").Created(t0.Add(2)).Obj(),
			},
			dispatch: map[string]string{"w1": "east", "w2": "east", "w3": ""},
		},
		{
			name: "creatable counts of one GPU are bounded by its free compute share",
			clusters: []Cluster{makeCluster("east").Modes(FracMIG).
				MIGNode(h100, 1000, []mig{{"3g.40gb", 2}, {"4g.40gb", 1}}).Obj()},
			pending: []*Workload{
				makeWorkload("big", "t/a").PodSet("main", 1, 1, 0, h100).MIG("4g.40gb").Obj(),
				makeWorkload("s1", "t/a").PodSet("main", 1, 1, 0, h100).MIG("3g.40gb").Created(t0.Add(1)).Obj(),
				makeWorkload("s2", "t/a").PodSet("main", 1, 1, 0, h100).MIG("3g.40gb").Created(t0.Add(2)).Obj(),
			},
			dispatch: map[string]string{"big": "east", "s1": "east", "s2": ""},
		},
		{
			name: "a MIG request without a profile takes the smallest covering profile",
			clusters: []Cluster{makeCluster("east").Modes(FracMIG).
				MIGNode(h100, 0, []mig{{"1g.10gb", 3}, {"2g.20gb", 1}}, []mig{{"3g.40gb", 1}, {"4g.40gb", 1}}).Obj()},
			pending: []*Workload{
				makeWorkload("m300", "t/a").PodSet("main", 1, 1, 300, h100).Mode(FracMIG).Obj(),
				makeWorkload("m100", "t/a").PodSet("main", 1, 1, 100, h100).Mode(FracMIG).Obj(),
				makeWorkload("mem", "t/a").PodSet("main", 1, 1, 100, h100).Mode(FracMIG).GPUMem(15000).Obj(),
			},
			dispatch: map[string]string{"m300": "east", "m100": "east", "mem": "east"},
			mig:      map[string]string{"m300": "3g.40gb", "m100": "1g.10gb", "mem": "2g.20gb"},
			usage:    map[string]int64{"m300": 428, "m100": 142, "mem": 285},
		},
		{
			name: "a MIG request without a profile waits where no profile covers it",
			clusters: []Cluster{makeCluster("east").Modes(FracMIG).
				MIGNode(h100, 0, ones).Obj()},
			pending:  []*Workload{makeWorkload("m", "t/a").PodSet("main", 1, 1, 500, h100).Mode(FracMIG).Obj()},
			dispatch: map[string]string{"m": ""},
			reason:   map[string]string{"m": "no MIG profile of 500 milli"},
		},
		{
			name: "a MIG request without a profile is a milli share where no GPU advertises MIG layouts",
			clusters: []Cluster{
				makeCluster("east").Modes(FracMIG).Nodes(1, 8, h100, 0, 0).Obj(),
			},
			pending:  []*Workload{makeWorkload("m", "t/a").PodSet("main", 1, 1, 500, h100).Mode(FracMIG).Obj()},
			dispatch: map[string]string{"m": "east"},
			mig:      map[string]string{"m": ""},
			usage:    map[string]int64{"m": 500},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := fmt.Sprintf("%+v", tc.clusters)
			p := Decide(snapshot(q, tc.clusters, tc.pending...), DefaultConfig())
			if after := fmt.Sprintf("%+v", tc.clusters); after != before {
				t.Fatalf("Decide changed the snapshot's clusters:\n%s\n%s", before, after)
			}
			for id, want := range tc.dispatch {
				d := dispatchOf(p, id)
				switch {
				case want == "" && d != nil:
					t.Fatalf("%s dispatched to %s %+v, want pending", id, d.Cluster, d.Placement)
				case want != "" && d == nil:
					t.Fatalf("%s pending (%+v), want dispatched to %s", id, pendingOf(p, id), want)
				case want != "" && d.Cluster != want:
					t.Fatalf("%s dispatched to %s, want %s", id, d.Cluster, want)
				}
			}
			for id, want := range tc.mig {
				if d := dispatchOf(p, id); d == nil || d.Placement[0].MIG != want {
					t.Fatalf("%s placement %+v, want MIG profile %q", id, d, want)
				}
			}
			for id, want := range tc.usage {
				if d := dispatchOf(p, id); d == nil || usageMilli(d.Usage) != want {
					t.Fatalf("%s usage %+v, want %d milli", id, d, want)
				}
			}
			for id, want := range tc.reason {
				pe := pendingOf(p, id)
				if pe == nil || !strings.Contains(pe.Code.String()+": "+pe.Reason, want) {
					t.Fatalf("%s pending %+v, want reason containing %q", id, pe, want)
				}
			}
		})
	}
}

// Every replica of a MIG gang lands on a GPU with a free instance, and the
// placement names GPUs whose instances add up.
func TestPlanMIGGangUsesDistinctInstances(t *testing.T) {
	c := makeCluster("east").Modes(FracMIG).
		MIGNode(h100, 0, []mig{{"1g.10gb", 2}}, []mig{{"1g.10gb", 1}, {"3g.40gb", 1}}).Obj()
	q := queues(h100, map[string]int64{"a": 100})
	w := makeWorkload("g", "t/a").PodSet("main", 3, 1, 0, h100).MIG("1g.10gb").Obj()
	p := Decide(snapshot(q, []Cluster{c}, w), DefaultConfig())
	d := dispatchOf(p, "g")
	if d == nil {
		t.Fatalf("gang of 3 x 1g.10gb pending: %+v", p.Pending)
	}
	per := map[int]int{}
	for _, r := range d.Placement[0].Replicas {
		per[r.GPUs[0]]++
	}
	if per[0] != 2 || per[1] != 1 {
		t.Fatalf("instances per GPU %v, want 2 on GPU 0 and 1 on GPU 1", per)
	}
	w4 := makeWorkload("g4", "t/a").PodSet("main", 4, 1, 0, h100).MIG("1g.10gb").Obj()
	if p := Decide(snapshot(q, []Cluster{c}, w4), DefaultConfig()); dispatchOf(p, "g4") != nil {
		t.Fatalf("gang of 4 x 1g.10gb dispatched with 3 instances free")
	}
}
