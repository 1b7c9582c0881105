package slurm

import (
	"slices"
	"testing"
)

func FuzzParseGres(f *testing.F) {
	for _, s := range []string{
		"gpu:h100:8,shard:h100:32,mps:h100:800",
		"gpu:h100:2(IDX:0-1,5),shard:h100:0(IDX:N/A),mps:h100:1(IDX:0)",
		"gpu:h100:8(S:0-1)", "mps:50(IDX:0)", "gpu", "(null)", "gpu:1(IDX:0-4096)", "a:b:c:d", "((", "x(IDX:1,S:0)",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		gs, err := ParseGres(s)
		if err != nil {
			return
		}
		for _, g := range gs {
			if g.Name == "" || g.Count < 0 {
				t.Fatalf("ParseGres(%q) gave %+v", s, g)
			}
			if !slices.IsSorted(g.IDX) {
				t.Fatalf("IDX not sorted: %v", g.IDX)
			}
			for i, x := range g.IDX {
				if x < 0 || x > maxIndex || (i > 0 && g.IDX[i-1] == x) {
					t.Fatalf("IDX %v out of range or duplicated", g.IDX)
				}
			}
		}
	})
}

func FuzzExpandHostlist(f *testing.F) {
	for _, s := range []string{"gpu[1-2,4],cpu7", "n[08-10]", "a", "[", "x[1-99999999]", "r[1-2]n[1-2]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		names, err := ExpandHostlist(s)
		if err != nil {
			return
		}
		if len(names) > maxHostlist {
			t.Fatalf("%d names from %q", len(names), s)
		}
		for _, n := range names {
			if n == "" {
				t.Fatalf("empty name from %q", s)
			}
		}
	})
}

// FuzzAdapter feeds arbitrary bytes, seeded with the recorded fixtures, to
// every v0.0.38 decoder and to the inventory builder: they may fail, never
// panic, and what they accept must be usable.
func FuzzAdapter(f *testing.F) {
	for _, name := range []string{"v0038_nodes_fractional.json", "v0038_jobs_running.json", "v0038_submit_impossible.json", "v0038_delete_unknown.json"} {
		f.Add(readFixture(f, name))
	}
	f.Add([]byte(`{"nodes":[{"name":"a","gres":"gpu:9999999","gres_used":"gpu:1(IDX:0)"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		a := v0038{}
		_, _ = DetectAdapter(data)
		_, _ = a.DecodeErrors(data)
		_, _, _ = a.DecodeSubmit(data)
		jobs, _, jerr := a.DecodeJobs(data)
		for _, j := range jobs {
			if j.ID <= 0 {
				t.Fatalf("accepted job id %d", j.ID)
			}
			_ = MapJobState(j.State, j.ExitCode, j.Reason, false)
		}
		nodes, _, err := a.DecodeNodes(data)
		if err != nil {
			return
		}
		if jerr != nil {
			jobs = nil
		}
		c := &Connector{}
		inv, _, err := buildInventory(nodes, jobs, nil, invOptions{classOf: c.classOf})
		if err != nil {
			return
		}
		for _, n := range inv.Nodes {
			for _, g := range n.Gpus {
				if g.FreeMilli < 0 || g.FreeMilli > 1000 {
					t.Fatalf("node %s gpu %d free milli %d", n.Name, g.Index, g.FreeMilli)
				}
			}
		}
	})
}
