package quota

import (
	"fmt"
	"testing"
	"time"
)

var benchClasses = []string{"nvidia-a100-80gb", "nvidia-h100-80gb", "nvidia-t4"}

// benchTree builds 10 tenants x 10 teams x 9 projects: 1,010 queues, 900
// leaves, 3 classes, with quota at every level and half the leaves busy.
func benchTree(b *testing.B) *Tree {
	b.Helper()
	var specs []QueueSpec
	lim := func(nominal int64) map[string]Limits {
		m := map[string]Limits{}
		for i, c := range benchClasses {
			m[c] = Limits{Nominal: nominal * int64(i+1), BorrowLimit: nominal, LendLimit: Unlimited}
		}
		return m
	}
	for i := range 10 {
		tenant := fmt.Sprintf("tenant-%d", i)
		specs = append(specs, QueueSpec{Path: tenant, Weight: float64(i + 1), Limits: lim(90_000)})
		for j := range 10 {
			team := fmt.Sprintf("%s/team-%d", tenant, j)
			specs = append(specs, QueueSpec{Path: team, Limits: lim(9_000)})
			for k := range 9 {
				specs = append(specs, QueueSpec{Path: fmt.Sprintf("%s/project-%d", team, k), Limits: lim(1_000)})
			}
		}
	}
	t, err := NewTree(specs)
	if err != nil {
		b.Fatal(err)
	}
	for i, leaf := range t.Leaves() {
		if i%2 == 0 {
			t.Charge(leaf, benchClasses[i%3], 500)
		}
	}
	return t
}

func BenchmarkCheck(b *testing.B) {
	t := benchTree(b)
	leaves := t.Leaves()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if !t.Check(leaves[i%len(leaves)], benchClasses[i%3], 250).OK {
			b.Fatal("unexpected refusal")
		}
	}
}

func BenchmarkCheckID(b *testing.B) {
	t := benchTree(b)
	var ids []QueueID
	for _, p := range t.Leaves() {
		id, _ := t.ID(p)
		ids = append(ids, id)
	}
	c, _ := t.ClassID(benchClasses[1])
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if !t.CheckID(ids[i%len(ids)], c, 250).OK {
			b.Fatal("unexpected refusal")
		}
	}
}

func BenchmarkCheckRefused(b *testing.B) {
	t := benchTree(b)
	leaves := t.Leaves()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if t.Check(leaves[i%len(leaves)], benchClasses[0], 1_000_000).OK {
			b.Fatal("unexpected admission")
		}
	}
}

func BenchmarkChargeRelease(b *testing.B) {
	t := benchTree(b)
	leaves := t.Leaves()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		leaf := leaves[i%len(leaves)]
		t.Charge(leaf, benchClasses[1], 250)
		t.Release(leaf, benchClasses[1], 250)
	}
}

func BenchmarkClone(b *testing.B) {
	t := benchTree(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = t.Clone()
	}
}

func BenchmarkMarkRollback(b *testing.B) {
	t := benchTree(b)
	leaves := t.Leaves()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m := t.Mark()
		for k := range 8 { // an 8-member gang
			t.Charge(leaves[(i+k)%len(leaves)], benchClasses[1], 250)
		}
		t.Rollback(m)
	}
}

func BenchmarkFairTree(b *testing.B) {
	t := benchTree(b)
	l := NewLedger(7*24*time.Hour, map[string]float64{benchClasses[1]: 2})
	for i, leaf := range t.Leaves() {
		l.Accrue(leaf, benchClasses[i%3], int64(1000*(i%7+1)), epoch, epoch.Add(time.Duration(i%13+1)*time.Hour))
	}
	now := epoch.Add(24 * time.Hour)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if f := FairTree(t, l, now); len(f) != 900 {
			b.Fatalf("%d factors", len(f))
		}
	}
}

func BenchmarkReclaimNeeds(b *testing.B) {
	t := benchTree(b)
	// One project borrows all its team's idle quota up to the team's limit;
	// a sibling wants its nominal back.
	t.Charge("tenant-0/team-0/project-1", benchClasses[0], 17_500)
	if t.Fits("tenant-0/team-0/project-2", benchClasses[0], 1_000) {
		b.Fatal("no reclaim needed")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ok := t.ReclaimNeeds("tenant-0/team-0/project-2", benchClasses[0], 1_000); !ok {
			b.Fatal("reclaim impossible")
		}
	}
}
