package dispatch

import (
	"fmt"
	"slices"
	"testing"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
)

func evFor(workload string, seq int) batchEvent {
	return batchEvent{ev: &agentv1.DispatchEvent{WorkloadId: workload, EventId: fmt.Sprintf("%s/%d", workload, seq)}}
}

// Chunks of at most the size asked for in workloads, each holding all the
// events of its workloads in their order, so that they can commit side by
// side.
func TestChunkByWorkloadKeepsEachWorkloadTogether(t *testing.T) {
	var evs []batchEvent
	// Thirty workloads with three events each, interleaved as agents send
	// them.
	for seq := range 3 {
		for w := range 30 {
			evs = append(evs, evFor(fmt.Sprintf("w%d", w), seq))
		}
	}
	chunks, disjoint := chunkByWorkload(evs, 8)
	if !disjoint {
		t.Fatal("events that all carry a workload id were not split by workload")
	}
	owner := map[string]int{}
	total := 0
	for i, c := range chunks {
		total += len(c)
		last := map[string]int{}
		for _, e := range c {
			w := e.ev.GetWorkloadId()
			if o, ok := owner[w]; ok && o != i {
				t.Fatalf("workload %s in chunks %d and %d", w, o, i)
			}
			owner[w] = i
			var seq int
			fmt.Sscanf(e.ev.GetEventId()[len(w)+1:], "%d", &seq)
			if p, ok := last[w]; ok && seq < p {
				t.Fatalf("workload %s: event %d after %d", w, seq, p)
			}
			last[w] = seq
		}
		if len(last) > 8 {
			t.Errorf("chunk %d writes %d workloads, more than the size 8", i, len(last))
		}
	}
	if total != len(evs) || len(chunks) < 3 {
		t.Fatalf("%d events in %d chunks, want all %d in several", total, len(chunks), len(evs))
	}
}

// An event without a workload id could touch any workload: the events are
// then cut in arrival order, to be applied one chunk after another.
func TestChunkByWorkloadWithoutIDsKeepsOrder(t *testing.T) {
	evs := []batchEvent{evFor("a", 0), evFor("", 1), evFor("b", 2), evFor("a", 3), evFor("c", 4)}
	chunks, disjoint := chunkByWorkload(evs, 2)
	if disjoint {
		t.Fatal("events without a workload id were taken as disjoint")
	}
	var got []batchEvent
	for _, c := range chunks {
		got = append(got, c...)
	}
	if !slices.EqualFunc(got, evs, func(a, b batchEvent) bool { return a.ev == b.ev }) {
		t.Fatal("events were reordered")
	}
	if one, d := chunkByWorkload(evs[:2], 2); len(one) != 1 || !d {
		t.Fatalf("a set that fits one chunk: %d chunks, disjoint %v", len(one), d)
	}
}

// With small event chunks, a round of agent events commits as several
// transactions side by side: every workload still reaches RUNNING, once.
func TestEventChunksCommitSideBySide(t *testing.T) {
	cfg := fastConfig()
	cfg.EventBatch = 8
	e := newEnv(t, cfg)
	e.batching = true
	const n = 200
	_, agents := e.runOnTwoClusters(n)
	launched := 0
	for _, a := range agents {
		launched += len(a.checkLaunchedOnce(t))
	}
	if launched != n {
		t.Fatalf("%d workloads launched, want %d", launched, n)
	}
}
