package embedetcd

import (
	"context"
	"errors"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
)

// compactSteps is how many times per CompactEvery the member's compactor
// looks at the revision and compacts. etcd's own periodic compactor
// compacts once per period to the revision of one period ago, so it keeps
// between one and two periods of history, 1.5 on average: at 2,000
// workloads/s, half a minute more of dead revisions in the database and
// of deleted keys in etcd's in-memory index, which every collection of the
// hub's process marks. Compacting in steps keeps between one period and
// one period plus a step. Each compaction walks etcd's whole key index
// (about 0.15 s of CPU at 300,000 keys), so steps are not free: five cut
// the average history by a quarter for five walks a period.
const compactSteps = 5

// revisionMark is the revision a member had reached at a time.
type revisionMark struct {
	at  time.Time
	rev int64
}

// compactPlan says when to compact to what, from the revisions seen over
// time. It keeps every revision for at least keep. It does no I/O and
// reads no clock: the compactor hands it both, and tells it what was
// compacted.
type compactPlan struct {
	keep  time.Duration
	marks []revisionMark // oldest first
	done  int64          // the last revision compacted to
}

// observe records rev at now and returns the revision to compact to, the
// newest one seen at least keep ago, or false when none newer than the
// last compaction is that old.
func (p *compactPlan) observe(now time.Time, rev int64) (int64, bool) {
	if n := len(p.marks); n == 0 || p.marks[n-1].rev != rev {
		p.marks = append(p.marks, revisionMark{at: now, rev: rev})
	}
	i := 0
	for i < len(p.marks) && !p.marks[i].at.After(now.Add(-p.keep)) {
		i++
	}
	if i == 0 {
		return 0, false
	}
	target := p.marks[i-1].rev
	// The newest old-enough mark stays: it is the floor the next compaction
	// starts from when no newer mark is old enough yet.
	p.marks = append(p.marks[:0], p.marks[i-1:]...)
	return target, target > p.done
}

// compacted records that history up to rev is gone.
func (p *compactPlan) compacted(rev int64) { p.done = max(p.done, rev) }

// runCompactor compacts e's history in compactSteps steps per keep until
// the member stops. Only the leader compacts (as etcd's own compactor),
// but every member keeps its marks, so a new leader compacts at its first
// step. A compaction that fails is tried again at the next step, to the
// revision due then.
func runCompactor(e *embed.Etcd, keep time.Duration) {
	srv := e.Server
	plan := &compactPlan{keep: keep}
	tick := time.NewTicker(keep / compactSteps)
	defer tick.Stop()
	for {
		select {
		case <-srv.StopNotify():
			return
		case now := <-tick.C:
			rev, due := plan.observe(now, srv.KV().Rev())
			if !due || srv.Leader() != srv.MemberID() {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), keep)
			_, err := srv.Compact(ctx, &pb.CompactionRequest{Revision: rev})
			cancel()
			if err == nil || errors.Is(err, mvcc.ErrCompacted) {
				plan.compacted(rev)
			}
		}
	}
}
