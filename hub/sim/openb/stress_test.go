package openb

import (
	"reflect"
	"strings"
	"testing"

	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

func stressPods() ([]NodeSpec, []Pod) {
	nodes := []NodeSpec{{Name: "a", CPUMilli: 64000, MemMiB: 1 << 18, GPUs: 8, Model: "V100M16"}, {Name: "b", CPUMilli: 64000, MemMiB: 1 << 18, GPUs: 8, Model: "V100M32"}, {Name: "c", CPUMilli: 32000, MemMiB: 1 << 18, GPUs: 2, Model: "T4"}}
	var pods []Pod
	for i := 0; i < 100; i++ {
		p := Pod{Name: "p" + string(rune('a'+i%26)) + string(rune('a'+i/26))}
		switch i % 4 {
		case 0:
			p.Req = gpufit.Request{CPUMilli: 2000, MemMiB: 1024}
		case 1:
			p.Req = gpufit.Request{CPUMilli: 4000, MemMiB: 1024, GPUs: 1, Milli: 300}
		case 2:
			p.Req = gpufit.Request{CPUMilli: 4000, MemMiB: 1024, GPUs: 1, Milli: 1000}
		default:
			p.Req = gpufit.Request{CPUMilli: 8000, MemMiB: 1024, GPUs: 4, Milli: 1000}
		}
		pods = append(pods, p)
	}
	return nodes, pods
}

func TestStressVariants(t *testing.T) {
	nodes, pods := stressPods()
	orig := append([]Pod(nil), pods...)
	cpuOf := func(ps []Pod) (cpu int64, n int) {
		for _, p := range ps {
			if p.Req.GPUs == 0 {
				cpu += p.Req.CPUMilli
				n++
			}
		}
		return
	}
	base, _ := cpuOf(pods)
	for _, level := range []int{50, 200} {
		v, err := Stress(pods, nodes, "cpu", level, 1)
		if err != nil {
			t.Fatal(err)
		}
		cpu, _ := cpuOf(v)
		want := base * int64(level) / 100
		if (level > 100 && (cpu < want || cpu > want+2000)) || (level < 100 && cpu > want) {
			t.Errorf("cpu%d: CPU-only CPU %d, want about %d", level, cpu, want)
		}
		if gpuPods := len(v) - func() int { _, n := cpuOf(v); return n }(); gpuPods != 75 {
			t.Errorf("cpu%d changed the GPU pods: %d left", level, gpuPods)
		}
	}
	sh, err := Stress(pods, nodes, "share", 100, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range sh {
		if orig[i].Req.GPUs == 1 && orig[i].Req.Milli == 1000 && p.Req.Milli != 300 {
			t.Fatalf("share100: whole single-GPU pod %s kept %d milli, want the list's only share, 300", p.Name, p.Req.Milli)
		}
		if orig[i].Req.GPUs == 4 && p.Req.Milli != 1000 {
			t.Fatalf("share100 made a 4-GPU pod fractional")
		}
	}
	sp, err := Stress(pods, nodes, "spec", 100, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range sp {
		if p.Req.GPUs == 0 && len(p.Classes) != 0 {
			t.Fatalf("spec100 constrained a CPU-only pod")
		}
		if p.Req.GPUs == 4 && (len(p.Classes) == 0 || strings.Contains(strings.Join(p.Classes, "|"), "T4")) {
			t.Fatalf("spec100 gave a 4-GPU pod %v (T4 nodes have 2 GPUs)", p.Classes)
		}
	}
	if !reflect.DeepEqual(pods, orig) {
		t.Fatal("Stress changed its input")
	}
	a, _ := Stress(pods, nodes, "share", 50, 7)
	b, _ := Stress(pods, nodes, "share", 50, 7)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different variants")
	}
}

func TestParseStress(t *testing.T) {
	base, kind, level, seed, ok, err := ParseStress("default+cpu200@7")
	if err != nil || !ok || base != "default" || kind != "cpu" || level != 200 || seed != 7 {
		t.Fatalf("got %q %q %d %d %v %v", base, kind, level, seed, ok, err)
	}
	if _, _, _, seed, ok, _ := ParseStress("gpushare40+spec30"); !ok || seed != 1 {
		t.Fatal("default seed")
	}
	if _, _, _, _, ok, err := ParseStress("default"); ok || err != nil {
		t.Fatal("a plain list is not a variant")
	}
	for _, bad := range []string{"default+cpu", "default+foo10", "default+share150", "default+cpu10@x"} {
		if _, _, _, _, _, err := ParseStress(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
