package slurm

import (
	"fmt"
	"time"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// maxRuntimeLimit applies a workload's max_runtime to a Slurm time limit:
// the job gets --time of at most max_runtime (rounded up to whole minutes
// by the backend), so the cluster enforces the promise the hub's backfill
// relies on. A template time_limit that is shorter still wins.
func maxRuntimeLimit(w *meridianv1.Workload, current time.Duration) (time.Duration, error) {
	mr := w.GetMaxRuntime()
	if mr == nil {
		return current, nil
	}
	if err := mr.CheckValid(); err != nil || mr.AsDuration() <= 0 {
		return current, fmt.Errorf("workload.max_runtime: must be a positive duration")
	}
	d := mr.AsDuration()
	if current > 0 && current < d {
		return current, nil
	}
	return d, nil
}
