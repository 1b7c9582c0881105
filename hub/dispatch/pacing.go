package dispatch

import (
	"slices"
	"time"
)

// cycleDuty is how many times a typical cycle's duration must pass between
// cycle starts: 2 keeps the loop under half a core. (3 left more CPU to the
// rest but made dispatch latency at 2,000 workloads/s worse, not better.)
const cycleDuty = 2

// pacer spaces dispatch cycles by the median of the last few cycles'
// durations, not by the last one alone. A cycle that a garbage collection
// or a slow etcd commit stretched to several times its usual length would
// otherwise double the wait before the next cycle, and every workload
// submitted in that wait would carry the delay; the median ignores such an
// outlier but still follows a state that has grown so every cycle is slow.
type pacer struct {
	recent [5]time.Duration
	n      int // cycles recorded, capped at len(recent)
	next   int // slot the next record overwrites
}

// record notes how long a cycle took.
func (p *pacer) record(took time.Duration) {
	p.recent[p.next] = took
	p.next = (p.next + 1) % len(p.recent)
	p.n = min(p.n+1, len(p.recent))
}

// gap is the least time from one cycle's start to the next: minPeriod, or
// cycleDuty times the median recent cycle, whichever is longer.
func (p *pacer) gap(minPeriod time.Duration) time.Duration {
	if p.n == 0 {
		return minPeriod
	}
	var buf [len(p.recent)]time.Duration
	s := buf[:p.n]
	copy(s, p.recent[:p.n])
	slices.Sort(s)
	return max(minPeriod, cycleDuty*s[p.n/2])
}
