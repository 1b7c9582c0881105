package dispatch

import (
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// shareButStatus returns a workload equal to w that shares every field
// with w but the status, which it copies deeply. An agent's event changes
// only a workload's status (its phase, times, message, conditions), so the
// event transaction starts from such a copy of the loop's last write
// (recentWrites) instead of a deep copy: the pod sets, selectors, labels
// and runtime template, most of a workload's objects, are not copied
// again for every event. Nothing may change the shared fields; in tests a
// writeGuard checks it, and TestShareButStatusCopiesEveryField fails when
// a field added to Workload is not listed here.
//
// A workload with fields this hub does not know (a newer hub wrote it)
// is copied whole, as CloneVT keeps them and a shallow copy could not.
func shareButStatus(w *meridianv1.Workload) *meridianv1.Workload {
	if w == nil {
		return nil
	}
	if len(w.ProtoReflect().GetUnknown()) > 0 {
		return cloneWorkload(w)
	}
	return &meridianv1.Workload{
		Id:                   w.Id,
		Name:                 w.Name,
		Queue:                w.Queue,
		Priority:             w.Priority,
		Preemptible:          w.Preemptible,
		ClusterSelector:      w.ClusterSelector,
		PodSets:              w.PodSets,
		Runtime:              w.Runtime,
		RequeueOnClusterLoss: w.RequeueOnClusterLoss,
		Labels:               w.Labels,
		IdempotencyKey:       w.IdempotencyKey,
		CreateTime:           w.CreateTime,
		Status:               w.Status.CloneVT(),
		SubmittedBy:          w.SubmittedBy,
		MaxRuntime:           w.MaxRuntime,
		TraceParent:          w.TraceParent,
	}
}

// testWriteGuard, set by the package's tests, guards every loop's
// recentWrites.
var testWriteGuard *writeGuard

// writeGuard keeps a deep copy of each workload recentWrites holds and
// records every entry found changed since it was put: the rule that
// nobody changes a kept workload, which copies that share its fields rely
// on, made checkable. Tests only; it costs a deep copy and a comparison per
// entry.
type writeGuard struct {
	mu       sync.Mutex
	kept     map[guardKey]*meridianv1.Workload
	failures []string
}

type guardKey struct {
	key string
	rev int64
}

func newWriteGuard() *writeGuard {
	return &writeGuard{kept: map[guardKey]*meridianv1.Workload{}}
}

func (g *writeGuard) keep(key string, rev int64, w *meridianv1.Workload) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.kept[guardKey{key, rev}] = cloneWorkload(w)
}

// check records a failure when e no longer equals what was put.
func (g *writeGuard) check(key string, e ownWrite) {
	g.mu.Lock()
	defer g.mu.Unlock()
	want, ok := g.kept[guardKey{key, e.rev}]
	if ok && !proto.Equal(want, e.w) {
		g.failures = append(g.failures, fmt.Sprintf("the workload kept for %s at revision %d changed after it was put (was %v, now %v)", key, e.rev, want, e.w))
	}
}

func (g *writeGuard) release(key string, rev int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.kept, guardKey{key, rev})
}

// Failures returns what check found.
func (g *writeGuard) Failures() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.failures...)
}
