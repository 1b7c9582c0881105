package simcluster

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// The launch journal records every launch with its gang size, every
// idempotent repeat and every end, in order, and reads back.
func TestLaunchJournal(t *testing.T) {
	ctx := context.Background()
	var buf bytes.Buffer
	cfg, err := Example("h100-nvlink")
	if err != nil {
		t.Fatal(err)
	}
	clk := NewFakeClock(time.Unix(0, 0))
	c, err := New(cfg, Options{Clock: clk, Journal: &buf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if err := c.Launch(ctx, wl("w1").podSet("m", 3, 1000, meridianv1.Topology_TOPOLOGY_CLUSTER).label(LabelDuration, "1s").dispatch("d1")); err != nil {
		t.Fatal(err)
	}
	if err := c.Launch(ctx, wl("w1").podSet("m", 3, 1000, meridianv1.Topology_TOPOLOGY_CLUSTER).label(LabelDuration, "1s").dispatch("d1")); err != nil {
		t.Fatal(err)
	}
	if err := c.Launch(ctx, wl("w2").podSet("m", 4, 1000, 0).minReplicas(2).label(LabelDuration, "1h").dispatch("d2")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if err := c.Cancel(ctx, "d2", true); err != nil {
		t.Fatal(err)
	}
	es, err := ReadJournal(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		s := e.Event + " " + e.DispatchID
		switch e.Event {
		case JournalLaunch:
			s += " " + strings.Repeat("r", e.Replicas) + "/" + strings.Repeat("r", e.Wanted)
			if len(e.Nodes) != e.Replicas {
				t.Errorf("%s: %d nodes for %d replicas", e.DispatchID, len(e.Nodes), e.Replicas)
			}
		case JournalEnd:
			s += " " + e.State
		}
		if e.Time.IsZero() || e.WorkloadID == "" {
			t.Errorf("entry %+v lacks its time or workload", e)
		}
		got = append(got, s)
	}
	want := []string{"launch d1 rrr/rrr", "repeat d1", "launch d2 rrrr/rr", "end d1 SUCCEEDED", "end d2 PREEMPTED"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("journal:\n got %q\nwant %q", got, want)
	}
}

// A torn last line (a killed agent) is skipped; a bad line before the end
// is an error.
func TestReadJournalTornLine(t *testing.T) {
	ok := `{"t":"2026-01-01T00:00:00Z","ev":"launch","dispatch":"d1"}` + "\n" + `{"t":"2026-01-01T00:00:0`
	es, err := ReadJournal(strings.NewReader(ok))
	if err != nil || len(es) != 1 {
		t.Fatalf("ReadJournal(torn) = %v, %v; want the first entry", es, err)
	}
	if _, err := ReadJournal(strings.NewReader("garbage\n" + ok)); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("ReadJournal(bad line 1) = %v, want an error naming line 1", err)
	}
}
