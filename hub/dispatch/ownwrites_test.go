package dispatch

import (
	"log/slog"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// The mirror takes a workload the loop wrote instead of decoding it, but
// only at the revision it was written at; any other revision is decoded
// from the stored bytes, and the entry does not outlive the key's next
// change.
func TestMirrorTakesOwnWritesAtTheirRevision(t *testing.T) {
	l := &Loop{log: slog.New(slog.DiscardHandler)}
	m := &mirror{}
	m.reset()
	w := queuedWorkload(1, time.Unix(1_700_000_000, 0))
	b, err := proto.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := WorkloadKey(w.GetId())

	l.own.add(k, 7, w)
	m.put(l, k, store.Item{Key: k, Value: b, ModRev: 7, CreateRev: 7})
	if got := m.workloads[k].pb; got != w {
		t.Fatalf("the mirror decoded a workload the loop handed it at the same revision")
	}

	// Written at 8, but the mirror first sees 9 (a later write won): it
	// must decode 9's bytes, and the entry for 8 is gone.
	stale := proto.Clone(w).(*meridianv1.Workload)
	stale.Priority = 99
	l.own.add(k, 8, stale)
	m.put(l, k, store.Item{Key: k, Value: b, ModRev: 9, CreateRev: 7})
	if got := m.workloads[k].pb; got == stale || got.GetPriority() == 99 {
		t.Fatalf("the mirror took a workload written at revision 8 for revision 9")
	}
	if l.own.take(k, 8) != nil {
		t.Fatal("the entry for revision 8 outlived the key's next change")
	}

	// A finished workload, which the mirror tells from its summary
	// without decoding, drops the entry too.
	done := proto.Clone(w).(*meridianv1.Workload)
	done.Status.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED
	db, err := proto.Marshal(done)
	if err != nil {
		t.Fatal(err)
	}
	l.own.add(k, 11, w)
	m.put(l, k, store.Item{Key: k, Value: db, ModRev: 12, CreateRev: 7})
	if l.own.take(k, 11) != nil {
		t.Fatal("the entry outlived a finished write the mirror read from its summary")
	}

	// A deleted key drops its entry too.
	l.own.add(k, 10, w)
	l.dropKey(k)
	if l.own.take(k, 10) != nil {
		t.Fatal("the entry of a deleted key was kept")
	}
}

// ownWrites stays bounded when nothing takes its entries.
func TestOwnWritesStayBounded(t *testing.T) {
	var o ownWrites
	w := &meridianv1.Workload{Id: "w"}
	for i := range maxOwnWrites + 10 {
		o.add(strconv.Itoa(i), int64(i), w) // distinct keys: without the bound, more than it
	}
	if n := len(o.m); n > maxOwnWrites {
		t.Fatalf("%d entries kept, at most %d allowed", n, maxOwnWrites)
	}
}

// recentWrites hands out a copy of a workload only at the revision it was
// written at; the copy is the caller's to change, a stale entry goes at
// its lookup, a queued or finished workload is not kept, and the entries stay
// bounded.
func TestRecentWritesCopyAtTheirRevision(t *testing.T) {
	var r recentWrites
	w := queuedWorkload(1, time.Unix(1_700_000_000, 0))
	r.put("q", 5, w)
	if r.copyAt("q", 5) != nil {
		t.Fatal("a queued workload was kept: no agent event rewrites it")
	}
	w = proto.Clone(w).(*meridianv1.Workload)
	w.Status.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED
	r.put("k", 7, w)
	c := r.copyAt("k", 7)
	if c == nil || c == w || !proto.Equal(c, w) {
		t.Fatalf("copyAt(7) = %v, want an equal copy of what was put", c)
	}
	c.Status.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING
	c.Priority = 42
	if w.GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED || w.Priority == 42 {
		t.Fatal("changing the copy changed the workload kept")
	}
	if r.copyAt("k", 8) != nil {
		t.Fatal("copyAt handed out revision 7's workload for revision 8")
	}
	if r.copyAt("k", 7) != nil {
		t.Fatal("the stale entry outlived a lookup at a later revision")
	}

	r.put("k", 9, w)
	done := proto.Clone(w).(*meridianv1.Workload)
	done.Status.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED
	r.put("k", 10, done)
	if r.copyAt("k", 9) != nil || r.copyAt("k", 10) != nil {
		t.Fatal("a finished workload (or the entry before it) was kept")
	}
	r.put("k", 11, w)
	r.drop("k")
	if r.copyAt("k", 11) != nil {
		t.Fatal("a dropped key kept its entry")
	}
	for i := range maxOwnWrites + 10 {
		r.put(strconv.Itoa(i), int64(i), w)
	}
	if n := len(r.m); n > maxOwnWrites {
		t.Fatalf("%d entries kept, at most %d allowed", n, maxOwnWrites)
	}
}
