package dispatch

import (
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-gpu/meridian/hub/scheduler"
	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// The mirror, fed only the keys that changed, always equals a mirror built
// from scratch out of the whole key space: through creates, updates,
// deletes and undecodable values; so do the sets derived from them
// (current, unacknowledged and orphan dispatches, queued and
// cancel-requested workloads).
func TestMirrorFollowsChangesLikeAFullRead(t *testing.T) {
	l := &Loop{log: slog.New(slog.DiscardHandler)}
	rng := rand.New(rand.NewPCG(7, 11))
	items := map[string]store.Item{}
	rev := int64(0)
	value := func(k string) []byte {
		switch {
		case rng.IntN(20) == 0:
			return []byte("\\xff not a value") // undecodable: left out
		case strings.HasPrefix(k, prefWorkloads):
			w := &meridianv1.Workload{Id: k[len(prefWorkloads):], Queue: []string{"t/a", "t/b"}[k[len(k)-1]%2],
				Status: &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase(1 + rng.IntN(8)), DispatchId: fmt.Sprint(rng.IntN(8))}}
			if rng.IntN(4) == 0 {
				w.Status.Conditions = []*meridianv1.Condition{{Type: ConditionCancelRequested, Status: meridianv1.ConditionStatus_CONDITION_STATUS_TRUE}}
			}
			b, _ := proto.Marshal(w)
			return b
		case strings.HasPrefix(k, prefDispatches):
			b, _ := encodeRecord(&Record{DispatchID: k[len(prefDispatches):], WorkloadID: fmt.Sprint(rng.IntN(8)), Cluster: "east",
				Acked: rng.IntN(2) == 0, Usage: []scheduler.ClassMilli{{Class: "h100", Milli: 500 * int64(k[len(k)-1]%4)}}})
			return b
		case strings.HasPrefix(k, prefQueues):
			b, _ := proto.Marshal(&meridianv1.Queue{Path: k[len(prefQueues):]})
			return b
		default:
			return []byte(fmt.Sprintf(`{"draining":%v}`, rng.IntN(2) == 0))
		}
	}
	keys := func() []string {
		var out []string
		for i := range 8 {
			out = append(out, prefWorkloads+fmt.Sprint(i), prefDispatches+fmt.Sprint(i))
		}
		return append(out, prefQueues+"t", prefQueues+"t/a", prefClusters+"east", prefClusters+"west")
	}()

	var inc mirror
	inc.reset()
	at := time.Unix(1000, 0)
	filed, charged := 0, 0
	for step := range 500 {
		// Acknowledged dispatches current before this step: those that
		// leave the current set in it must be filed as stopped.
		wasAcked := map[string]bool{}
		for d, c := range inc.current {
			wasAcked[d] = acked(c.r.r, c.w.doc())
		}
		changed := map[string]bool{}
		for range 1 + rng.IntN(4) {
			k := keys[rng.IntN(len(keys))]
			rev++
			if rng.IntN(4) == 0 {
				delete(items, k)
			} else {
				items[k] = store.Item{Key: k, Value: value(k), ModRev: rev}
			}
			changed[k] = true
		}
		for _, k := range slices.Sorted(maps.Keys(changed)) {
			if it, ok := items[k]; ok {
				inc.put(l, k, it)
			} else {
				inc.remove(k)
			}
		}
		at = at.Add(time.Second)
		inc.settle(at)
		var full mirror
		full.reset()
		for k, it := range items {
			full.put(l, k, it)
		}
		if d := mirrorDiff(&inc, &full); d != "" {
			t.Fatalf("step %d: %s", step, d)
		}
		if d := stoppedDiff(&inc, wasAcked, at); d != "" {
			t.Fatalf("step %d: %s", step, d)
		}
		for _, st := range inc.stopped {
			if st.at.Equal(at) {
				filed++
			}
		}
		if scheduler.ChargeOf(inc.runs).Len() > 0 {
			charged++
		}
	}
	if charged < 50 {
		t.Fatalf("the running list held usage after only %d of 500 steps; its kept charge is hardly checked", charged)
	}
	if filed < 10 {
		t.Fatalf("only %d dispatches were filed as stopped in 500 steps; the walk does not exercise it", filed)
	}
	t.Logf("%d dispatches filed as stopped", filed)
}

// stoppedDiff checks the stopped set after one step: every dispatch that
// was current and acknowledged before it and is not current after it is
// stopped as of this step, as Terminating work that holds no quota under
// an id of its own; nothing current is stopped.
func stoppedDiff(m *mirror, wasAcked map[string]bool, at time.Time) string {
	if len(m.leaving) != 0 {
		return fmt.Sprintf("%d dispatches left unsettled", len(m.leaving))
	}
	for d, acked := range wasAcked {
		_, cur := m.current[d]
		st, ok := m.stopped[d]
		switch {
		case cur || !acked:
			if ok && st.at.Equal(at) {
				return fmt.Sprintf("dispatch %s (current=%v, acked=%v) filed as stopped now", d, cur, acked)
			}
		case !ok || !st.at.Equal(at):
			return fmt.Sprintf("acknowledged dispatch %s left the current set but is not stopped as of now (%v)", d, ok)
		}
	}
	for d, st := range m.stopped {
		if _, cur := m.current[d]; cur {
			return fmt.Sprintf("dispatch %s is both current and stopped", d)
		}
		if !st.run.Terminating || st.run.Usage != nil || !strings.HasSuffix(st.run.Workload.ID, "/stopped:"+d) || st.run.Cluster != "east" {
			return fmt.Sprintf("dispatch %s: stopped view %+v", d, st.run)
		}
	}
	return ""
}

// mirrorDiff compares what a state would be built from.
func mirrorDiff(a, b *mirror) string {
	revs := func(m map[string]*wl) map[string]int64 {
		out := map[string]int64{}
		for id, w := range m {
			out[id] = w.modRev
		}
		return out
	}
	recs := func(m map[string]*rec) map[string]int64 {
		out := map[string]int64{}
		for id, r := range m {
			out[id] = r.modRev
		}
		return out
	}
	switch {
	case !maps.Equal(revs(a.byID), revs(b.byID)):
		return fmt.Sprintf("workloads by id %v, want %v", revs(a.byID), revs(b.byID))
	case !maps.Equal(recs(a.byDispatch), recs(b.byDispatch)):
		return fmt.Sprintf("dispatches by id %v, want %v", recs(a.byDispatch), recs(b.byDispatch))
	case !slices.Equal(slices.Sorted(maps.Keys(a.queues)), slices.Sorted(maps.Keys(b.queues))):
		return fmt.Sprintf("queues %v, want %v", slices.Sorted(maps.Keys(a.queues)), slices.Sorted(maps.Keys(b.queues)))
	case !maps.Equal(a.drain, b.drain):
		return fmt.Sprintf("drain %v, want %v", a.drain, b.drain)
	case !maps.Equal(revs(a.queued), revs(b.queued)):
		return fmt.Sprintf("queued %v, want %v", revs(a.queued), revs(b.queued))
	case !maps.Equal(revs(a.cancelReq), revs(b.cancelReq)):
		return fmt.Sprintf("cancel requested %v, want %v", revs(a.cancelReq), revs(b.cancelReq))
	case !maps.Equal(recs(a.orphans), recs(b.orphans)):
		return fmt.Sprintf("orphans %v, want %v", recs(a.orphans), recs(b.orphans))
	}
	// Unacknowledged: exactly the current dispatches without an ack.
	for _, m := range []*mirror{a, b} {
		for d, c := range m.current {
			if _, ok := m.unacked[d]; ok == acked(c.r.r, c.w.doc()) {
				return fmt.Sprintf("dispatch %s unacked=%v, but acked=%v", d, ok, acked(c.r.r, c.w.doc()))
			}
		}
		for d := range m.unacked {
			if _, ok := m.current[d]; !ok {
				return fmt.Sprintf("dispatch %s is unacked but not current", d)
			}
		}
		// The dense running list holds each current dispatch once, with
		// its own view, and its index finds it.
		if len(m.runs) != len(m.current) || len(m.runIDs) != len(m.runs) || len(m.runIdx) != len(m.runs) {
			return fmt.Sprintf("running list has %d entries (%d ids, %d indexed), want %d", len(m.runs), len(m.runIDs), len(m.runIdx), len(m.current))
		}
		for i, d := range m.runIDs {
			c, ok := m.current[d]
			if !ok || m.runIdx[d] != i || m.runs[i].Workload != c.run.Workload || m.runs[i].Cluster != c.run.Cluster {
				return fmt.Sprintf("running list entry %d (%s) does not match the current dispatch", i, d)
			}
		}
		// Its usage, kept as entries come and go, is the list's summed
		// afresh.
		if !m.charge.Equal(scheduler.ChargeOf(m.runs)) {
			return "the running list's kept charge differs from its usage summed afresh"
		}
		for d := range m.fresh {
			if _, ok := m.current[d]; !ok {
				return fmt.Sprintf("dispatch %s is fresh but not current", d)
			}
		}
	}
	cur := func(m map[string]curRef) map[string][2]int64 {
		out := map[string][2]int64{}
		for id, c := range m {
			out[id] = [2]int64{c.r.modRev, c.w.modRev}
		}
		return out
	}
	if !maps.Equal(cur(a.current), cur(b.current)) {
		return fmt.Sprintf("current %v, want %v", cur(a.current), cur(b.current))
	}
	// Each current dispatch's core view is made from its own record and
	// workload.
	for d, c := range a.current {
		want := (&mirror{}).running(c.r, c.w)
		if c.run == nil || c.run.Cluster != want.Cluster || !c.run.StartedAt.Equal(want.StartedAt) || c.run.Workload.ID != want.Workload.ID {
			return fmt.Sprintf("dispatch %s: running view %+v, want %+v", d, c.run, want)
		}
	}
	// And the sets agree with their definitions.
	for d, r := range b.byDispatch {
		w := b.byID[r.r.WorkloadID]
		isCur := w != nil && w.doc().GetStatus().GetDispatchId() == d && active(w.doc().GetStatus().GetPhase())
		if _, ok := b.current[d]; ok != isCur {
			return fmt.Sprintf("dispatch %s current=%v, want %v", d, ok, isCur)
		}
		if _, ok := b.orphans[d]; ok == isCur {
			return fmt.Sprintf("dispatch %s orphan=%v, want %v", d, ok, !isCur)
		}
	}
	return ""
}
