package api

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestEncodeULID(t *testing.T) {
	cases := []struct {
		name   string
		ms     uint64
		hi     uint16
		lo     uint64
		prefix string
		whole  string
	}{
		{name: "spec example time", ms: 1469922850259, prefix: "01ARZ3NDEK"},
		{name: "zero", whole: "00000000000000000000000000"},
		{name: "max", ms: 1<<48 - 1, hi: math.MaxUint16, lo: math.MaxUint64, whole: "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"},
		{name: "lowest random bit", lo: 1, whole: "00000000000000000000000001"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := encodeULID(c.ms, c.hi, c.lo)
			if len(got) != 26 {
				t.Fatalf("%q has %d characters", got, len(got))
			}
			if c.whole != "" && got != c.whole {
				t.Fatalf("got %s, want %s", got, c.whole)
			}
			if !strings.HasPrefix(got, c.prefix) {
				t.Fatalf("got %s, want prefix %s", got, c.prefix)
			}
		})
	}
}

func TestIDsIncreaseEvenWhenTheClockDoesNot(t *testing.T) {
	g := newIDGen()
	t0 := time.UnixMilli(1_800_000_000_000)
	times := []time.Time{t0, t0, t0, t0.Add(-time.Second), t0.Add(time.Millisecond), t0.Add(time.Millisecond)}
	prev := ""
	for i := 0; i < 300; i++ {
		id, err := g.next(times[i%len(times)])
		if err != nil {
			t.Fatal(err)
		}
		if !validWorkloadID(id) {
			t.Fatalf("id %q is not valid", id)
		}
		if id <= prev {
			t.Fatalf("id %d %s is not after %s", i, id, prev)
		}
		prev = id
	}
	for _, bad := range []string{"", "wl-", "wl-0000000000000000000000000", "wl-0000000000000000000000000U", "job-00000000000000000000000000"} {
		if validWorkloadID(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
}
