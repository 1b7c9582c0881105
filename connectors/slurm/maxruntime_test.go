package slurm

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
)

// max_runtime becomes the job's --time, so Slurm enforces the promise the
// hub's backfill relies on; a shorter template time_limit still wins.
func TestTranslateMaxRuntime(t *testing.T) {
	cases := []struct {
		name      string
		template  time.Duration // runtime.slurm.time_limit, 0 = unset
		max       *durationpb.Duration
		wantLimit time.Duration
		wantMin   int64
		wantErr   bool
	}{
		{"none", 0, nil, 0, 0, false},
		{"max_runtime only", 0, durationpb.New(90 * time.Minute), 90 * time.Minute, 90, false},
		{"rounded up to minutes", 0, durationpb.New(61 * time.Second), 61 * time.Second, 2, false},
		{"shorter template wins", 30 * time.Minute, durationpb.New(time.Hour), 30 * time.Minute, 30, false},
		{"shorter max_runtime wins", 2 * time.Hour, durationpb.New(time.Hour), time.Hour, 60, false},
		{"non-positive refused", 0, durationpb.New(0), 0, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newDispatch("mr")
			if tc.template > 0 {
				b = b.TimeLimit(tc.template)
			}
			d := b.Obj()
			d.Workload.MaxRuntime = tc.max
			p, err := translate(d, testShape())
			if tc.wantErr {
				if err == nil {
					t.Fatal("translate accepted a zero max_runtime")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.req.TimeLimit != tc.wantLimit || minutes(p.req.TimeLimit) != tc.wantMin {
				t.Fatalf("time limit %v (%d min), want %v (%d min)", p.req.TimeLimit, minutes(p.req.TimeLimit), tc.wantLimit, tc.wantMin)
			}
		})
	}
}
