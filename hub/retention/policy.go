package retention

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/api"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// Defaults that meridian-hub's flags use. Policy's zero value disables
// both limits; only the hub's flags turn them on by default.
const (
	// DefaultTTL is how long a finished workload is kept.
	DefaultTTL = 7 * 24 * time.Hour
	// DefaultMaxPerQueue is how many finished workloads a queue keeps.
	DefaultMaxPerQueue = 10_000
	// IdempotencyWindow is how long the API promises to keep an
	// idempotency key after its workload ended (docs/api.md). The hub uses
	// it as Policy.MinAge, so neither limit makes a client's retried
	// submit create a second workload within that window.
	IdempotencyWindow = 24 * time.Hour
)

// Policy says how long finished workloads are kept.
type Policy struct {
	// TTL is how long a workload is kept after it finished; 0 disables the
	// age limit.
	TTL time.Duration
	// MaxPerQueue is how many finished workloads each queue keeps, the
	// newest; 0 disables the cap.
	MaxPerQueue int
	// MinAge is a floor under both limits: a workload that ended less than
	// MinAge ago is never deleted, so a busy queue may briefly hold more
	// than MaxPerQueue. A nonzero TTL must not be shorter. 0 means no floor.
	MinAge time.Duration
}

// Enabled reports whether the policy deletes anything at all.
func (p Policy) Enabled() bool { return p.TTL > 0 || p.MaxPerQueue > 0 }

// Validate returns an error naming the field when a limit is negative.
func (p Policy) Validate() error {
	if p.TTL < 0 {
		return fmt.Errorf("retention: Policy.TTL %s is negative (0 disables it)", p.TTL)
	}
	if p.MaxPerQueue < 0 {
		return fmt.Errorf("retention: Policy.MaxPerQueue %d is negative (0 disables it)", p.MaxPerQueue)
	}
	if p.MinAge < 0 {
		return fmt.Errorf("retention: Policy.MinAge %s is negative (0 means no floor)", p.MinAge)
	}
	if p.TTL > 0 && p.TTL < p.MinAge {
		return fmt.Errorf("retention: Policy.TTL %s is shorter than Policy.MinAge %s", p.TTL, p.MinAge)
	}
	return nil
}

// Finished is what Select needs to know about one stored workload.
type Finished struct {
	ID    string
	Queue string
	Phase meridianv1.WorkloadPhase
	// End is when the workload finished; the zero time means unknown.
	End time.Time
}

// Reason says why a workload is deleted.
type Reason string

// The reasons Select gives.
const (
	// ReasonTTL: it finished longer than Policy.TTL ago.
	ReasonTTL Reason = "ttl"
	// ReasonQueueCap: its queue holds more than Policy.MaxPerQueue newer
	// finished workloads.
	ReasonQueueCap Reason = "queue_cap"
)

// Decision is one workload to delete.
type Decision struct {
	ID     string
	Queue  string
	End    time.Time
	Reason Reason
	// Index is the workload's position in Select's input.
	Index int
}

// Select returns the workloads to delete at now under p, oldest first (ties
// by id). It never returns a workload whose phase is not terminal, nor one
// that ended less than p.MinAge ago, nor one whose end time is unknown
// because of the TTL alone (such a workload counts as the oldest of its
// queue for the cap). A workload that
// qualifies for both limits is reported with ReasonQueueCap. Select does not
// modify ws.
func Select(ws []Finished, p Policy, now time.Time) []Decision {
	if !p.Enabled() {
		return nil
	}
	// Positions, not copies: a pass sees every finished workload, and a
	// copy of each is three more pointers for the collector to follow.
	byQueue := map[string][]int32{}
	for i := range ws {
		if !api.IsTerminal(ws[i].Phase) {
			continue
		}
		byQueue[ws[i].Queue] = append(byQueue[ws[i].Queue], int32(i))
	}
	var out []Decision
	for q, list := range byQueue {
		// Newest first; an unknown end sorts as oldest.
		slices.SortFunc(list, func(x, y int32) int {
			a, b := &ws[x], &ws[y]
			if c := b.End.Compare(a.End); c != 0 {
				return c
			}
			return cmp.Compare(b.ID, a.ID)
		})
		for i, at := range list {
			w := &ws[at]
			if p.MinAge > 0 && !w.End.IsZero() && now.Before(w.End.Add(p.MinAge)) {
				// Too recent to delete; it still takes a place under the cap.
				continue
			}
			switch {
			case p.MaxPerQueue > 0 && i >= p.MaxPerQueue:
				out = append(out, Decision{ID: w.ID, Queue: q, End: w.End, Reason: ReasonQueueCap, Index: int(at)})
			case p.TTL > 0 && !w.End.IsZero() && !now.Before(w.End.Add(p.TTL)):
				out = append(out, Decision{ID: w.ID, Queue: q, End: w.End, Reason: ReasonTTL, Index: int(at)})
			}
		}
	}
	slices.SortFunc(out, func(a, b Decision) int {
		if c := a.End.Compare(b.End); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out
}

// EndTime is when w finished: its end_time, else its last update, else its
// creation; the zero time when none is set.
func EndTime(w *meridianv1.Workload) time.Time {
	st := w.GetStatus()
	for _, ts := range []*timestamppb.Timestamp{st.GetEndTime(), st.GetUpdateTime(), w.GetCreateTime()} {
		if ts != nil && ts.IsValid() && (ts.GetSeconds() != 0 || ts.GetNanos() != 0) {
			return ts.AsTime()
		}
	}
	return time.Time{}
}
