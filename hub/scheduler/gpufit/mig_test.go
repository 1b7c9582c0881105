package gpufit

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseMIGProfile(t *testing.T) {
	for in, want := range map[string]string{
		"3g.40gb": "3g.40gb", "1g.10gb": "1g.10gb", "7g.80gb": "7g.80gb", "nvidia.com/mig-2g.20gb": "2g.20gb",
		"": "", "3g": "", "8g.80gb": "", "0g.10gb": "", "3g.0gb": "", "3g.40GB": "", "03g.40gb": "", "1g.10gb+me": "", "-1g.10gb": "",
	} {
		p, err := ParseMIGProfile(in)
		if want == "" {
			if err == nil || !strings.Contains(err.Error(), "for example 3g.40gb") {
				t.Errorf("ParseMIGProfile(%q) = %v, %v; want an error with an example", in, p, err)
			}
			continue
		}
		if err != nil || p.String() != want {
			t.Errorf("ParseMIGProfile(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	if m := (MIGProfile{Slices: 3, MemGB: 40}).Milli(); m != 428 {
		t.Errorf("3g milli = %d, want 428", m)
	}
	if m := (MIGProfile{Slices: 7, MemGB: 80}).Milli(); m != 1000 {
		t.Errorf("7g milli = %d, want 1000", m)
	}
}

// A MIG GPU serves only MIG requests with a free instance of their profile;
// Apply takes the instance and Undo gives it back exactly.
func TestMIGFitsApplyUndo(t *testing.T) {
	p3, _ := ParseMIGProfile("3g.40gb")
	p1, _ := ParseMIGProfile("1g.10gb")
	n := Node{CPUMilliFree: 8000, MemMiBFree: 8192,
		GPUs: []GPU{{FreeMilli: 1000, FreeMemMiB: 81920}, {FreeMilli: 1000, FreeMemMiB: 81920, MIG: 1}},
		MIG:  []MIGGPU{{Slots: []MIGSlot{{Profile: p3, Free: 2}, {Profile: p1, Free: 1}}}},
	}
	r3 := Request{GPUs: 1, Milli: p3.Milli(), MIG: p3}
	if err := r3.Validate(); err != nil {
		t.Fatal(err)
	}
	if bad := (Request{GPUs: 1, Milli: 500, MIG: p3}); bad.Validate() == nil {
		t.Fatal("a MIG request with the wrong milli validated")
	}
	whole := Request{GPUs: 2, Milli: 1000}
	if Fits(&n, &whole) {
		t.Fatal("two whole GPUs fit on a node with one plain GPU and one MIG GPU")
	}
	plain := Request{GPUs: 1, Milli: 300}
	if g := firstFree(&n, &plain, nil); len(g) != 1 || g[0] != 0 {
		t.Fatalf("a plain fraction picked GPUs %v, want [0]", g)
	}
	orig := n.Clone()
	c := n.Clone()
	for _, sc := range []Scorer{BestFit(), FGD(NewTargetWorkload(nil)), Meridian(NewTargetWorkload(nil))} {
		if _, g := sc.Score(&c, &r3, nil); len(g) != 1 || g[0] != 1 {
			t.Fatalf("%s picked GPUs %v for a 3g instance, want [1]", sc.Name(), g)
		}
	}
	c.Apply(&r3, []int{1})
	c.Apply(&r3, []int{1})
	if Fits(&c, &r3) {
		t.Fatal("a third 3g instance fits after two of two were taken")
	}
	if !Fits(&n, &r3) {
		t.Fatal("Apply on a clone took the original node's instances")
	}
	r1 := Request{GPUs: 1, Milli: p1.Milli(), MIG: p1}
	if !Fits(&c, &r1) || c.GPUs[1].FreeMilli != 1000-2*428 {
		t.Fatalf("after two 3g: fits 1g %v, free %d", Fits(&c, &r1), c.GPUs[1].FreeMilli)
	}
	c.Undo(&r3, []int{1})
	c.Undo(&r3, []int{1})
	if !reflect.DeepEqual(c, orig) || !reflect.DeepEqual(n, orig) {
		t.Fatalf("Apply/Undo not exact or wrote through a clone: %+v vs %+v", c, orig)
	}
}
