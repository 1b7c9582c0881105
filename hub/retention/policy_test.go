package retention

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

const (
	succeeded = meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED
	failed    = meridianv1.WorkloadPhase_WORKLOAD_PHASE_FAILED
	cancelled = meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED
	queued    = meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED
	running   = meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// fin builds a Finished that ended ago before t0.
func fin(id, queue string, phase meridianv1.WorkloadPhase, ago time.Duration) Finished {
	return Finished{ID: id, Queue: queue, Phase: phase, End: t0.Add(-ago)}
}

func TestSelect(t *testing.T) {
	day := 24 * time.Hour
	cases := []struct {
		name   string
		ws     []Finished
		policy Policy
		want   []string // "id:reason", oldest first
	}{
		{
			name:   "disabled policy deletes nothing",
			ws:     []Finished{fin("a", "q", succeeded, 100*day)},
			policy: Policy{},
		},
		{
			name: "ttl deletes only what is older than the ttl",
			ws: []Finished{
				fin("old", "q", succeeded, 8*day), fin("new", "q", failed, 6*day),
				fin("exact", "q", cancelled, 7*day), fin("fresh", "q", succeeded, time.Minute),
			},
			policy: Policy{TTL: 7 * day},
			want:   []string{"old:ttl", "exact:ttl"},
		},
		{
			name: "non-terminal workloads are never chosen, however old",
			ws: []Finished{
				fin("q1", "q", queued, 30*day), fin("r1", "q", running, 30*day),
				fin("u1", "q", meridianv1.WorkloadPhase_WORKLOAD_PHASE_UNSPECIFIED, 30*day), fin("s1", "q", succeeded, 30*day),
			},
			policy: Policy{TTL: day, MaxPerQueue: 1},
			want:   []string{"s1:ttl"},
		},
		{
			name: "non-terminal workloads do not count toward the cap",
			ws: []Finished{
				fin("r1", "q", running, 0), fin("r2", "q", running, 0), fin("s1", "q", succeeded, time.Hour),
			},
			policy: Policy{MaxPerQueue: 1},
		},
		{
			name: "cap keeps the newest of each queue",
			ws: []Finished{
				fin("a1", "a", succeeded, 1*time.Hour), fin("a2", "a", succeeded, 2*time.Hour), fin("a3", "a", failed, 3*time.Hour),
				fin("b1", "b", succeeded, 5*time.Hour), fin("b2", "b", succeeded, 4*time.Hour),
			},
			policy: Policy{MaxPerQueue: 1},
			want:   []string{"b1:queue_cap", "a3:queue_cap", "a2:queue_cap"},
		},
		{
			name: "cap wins as the reason when both apply; ttl still trims the kept",
			ws: []Finished{
				fin("a1", "a", succeeded, 10*day), fin("a2", "a", succeeded, 9*day), fin("a3", "a", succeeded, 1*day),
			},
			policy: Policy{TTL: 7 * day, MaxPerQueue: 2},
			want:   []string{"a1:queue_cap", "a2:ttl"},
		},
		{
			name: "equal end times: the larger (newer) id is kept",
			ws: []Finished{
				fin("wl-1", "q", succeeded, time.Hour), fin("wl-3", "q", succeeded, time.Hour), fin("wl-2", "q", succeeded, time.Hour),
			},
			policy: Policy{MaxPerQueue: 1},
			want:   []string{"wl-1:queue_cap", "wl-2:queue_cap"},
		},
		{
			name: "unknown end time: kept by the ttl, oldest for the cap",
			ws: []Finished{
				{ID: "nodate", Queue: "q", Phase: succeeded}, fin("recent", "q", succeeded, time.Hour),
			},
			policy: Policy{TTL: time.Minute},
			want:   []string{"recent:ttl"},
		},
		{
			name: "unknown end time goes first under the cap",
			ws: []Finished{
				{ID: "nodate", Queue: "q", Phase: succeeded}, fin("recent", "q", succeeded, time.Hour),
			},
			policy: Policy{MaxPerQueue: 1},
			want:   []string{"nodate:queue_cap"},
		},
		{
			name:   "an end time in the future (clock skew) is kept",
			ws:     []Finished{fin("skew", "q", succeeded, -time.Hour)},
			policy: Policy{TTL: time.Minute},
		},
		{
			name: "min age: the cap never deletes what ended within it",
			ws: []Finished{
				fin("n1", "q", succeeded, 1*time.Hour), fin("n2", "q", succeeded, 2*time.Hour),
				fin("n3", "q", succeeded, 3*time.Hour), fin("o1", "q", succeeded, 2*day),
			},
			policy: Policy{MaxPerQueue: 1, MinAge: day},
			want:   []string{"o1:queue_cap"},
		},
		{
			name: "min age equal to the ttl deletes at the ttl",
			ws: []Finished{
				fin("young", "q", succeeded, day-time.Second), fin("old", "q", succeeded, day),
			},
			policy: Policy{TTL: day, MinAge: day},
			want:   []string{"old:ttl"},
		},
		{
			name:   "empty input",
			policy: Policy{TTL: time.Minute, MaxPerQueue: 1},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := slices.Clone(c.ws)
			var got []string
			for _, d := range Select(c.ws, c.policy, t0) {
				got = append(got, d.ID+":"+string(d.Reason))
				if d.Index < 0 || d.Index >= len(c.ws) || c.ws[d.Index].ID != d.ID {
					t.Fatalf("decision for %s has index %d, which is not its position in the input", d.ID, d.Index)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("Select = %v, want %v", got, c.want)
			}
			if !slices.Equal(in, c.ws) {
				t.Fatal("Select modified its input")
			}
		})
	}
}

func TestSelectLargeQueueKeepsExactlyTheCap(t *testing.T) {
	var ws []Finished
	for i := range 1000 {
		ws = append(ws, fin(fmt.Sprintf("w%04d", i), "q", succeeded, time.Duration(i)*time.Second))
	}
	got := Select(ws, Policy{MaxPerQueue: 100}, t0)
	if len(got) != 900 {
		t.Fatalf("deleted %d, want 900", len(got))
	}
	// The 100 newest ended 0..99s ago; every deleted one ended earlier.
	for _, d := range got {
		if t0.Sub(d.End) < 100*time.Second {
			t.Fatalf("deleted %s, which is among the 100 newest", d.ID)
		}
	}
	if !got[0].End.Before(got[len(got)-1].End) {
		t.Fatal("decisions are not oldest first")
	}
}

func TestPolicyValidate(t *testing.T) {
	if err := (Policy{TTL: -time.Second}).Validate(); err == nil || !strings.Contains(err.Error(), "Policy.TTL") {
		t.Fatalf("negative TTL: %v", err)
	}
	if err := (Policy{MaxPerQueue: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "Policy.MaxPerQueue") {
		t.Fatalf("negative MaxPerQueue: %v", err)
	}
	if err := (Policy{MinAge: -time.Second}).Validate(); err == nil || !strings.Contains(err.Error(), "Policy.MinAge") {
		t.Fatalf("negative MinAge: %v", err)
	}
	if err := (Policy{TTL: time.Hour, MinAge: 24 * time.Hour}).Validate(); err == nil || !strings.Contains(err.Error(), "shorter than Policy.MinAge") {
		t.Fatalf("TTL under MinAge: %v", err)
	}
	if err := (Policy{MaxPerQueue: 5, MinAge: 24 * time.Hour}).Validate(); err != nil {
		t.Fatalf("cap with a floor: %v", err)
	}
	if err := (Policy{}).Validate(); err != nil {
		t.Fatalf("zero policy: %v", err)
	}
	if (Policy{}).Enabled() || !(Policy{MaxPerQueue: 1}).Enabled() || !(Policy{TTL: 1}).Enabled() {
		t.Fatal("Enabled is wrong")
	}
}

func TestEndTime(t *testing.T) {
	end, upd, created := t0.Add(-3*time.Hour), t0.Add(-2*time.Hour), t0.Add(-5*time.Hour)
	cases := []struct {
		name string
		w    *meridianv1.Workload
		want time.Time
	}{
		{"end time wins", &meridianv1.Workload{CreateTime: timestamppb.New(created),
			Status: &meridianv1.WorkloadStatus{EndTime: timestamppb.New(end), UpdateTime: timestamppb.New(upd)}}, end},
		{"update time without an end time", &meridianv1.Workload{CreateTime: timestamppb.New(created),
			Status: &meridianv1.WorkloadStatus{UpdateTime: timestamppb.New(upd)}}, upd},
		{"create time without a status", &meridianv1.Workload{CreateTime: timestamppb.New(created)}, created},
		{"nothing set", &meridianv1.Workload{}, time.Time{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := EndTime(c.w); !got.Equal(c.want) {
				t.Fatalf("EndTime = %v, want %v", got, c.want)
			}
		})
	}
}
