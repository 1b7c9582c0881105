package validation

import (
	"time"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// MaxRuntimeLimit is the longest max_runtime a workload may declare.
const MaxRuntimeLimit = 30 * 24 * time.Hour

// validateMaxRuntime checks max_runtime: when set, a valid, positive
// duration of at most MaxRuntimeLimit. The hub trusts it for backfill and
// the cluster enforces it, so a zero or absurd limit is refused here.
func validateMaxRuntime(c *collector, w *meridianv1.Workload) {
	mr := w.GetMaxRuntime()
	if mr == nil {
		return
	}
	if err := mr.CheckValid(); err != nil {
		c.add("max_runtime", "%v", err)
		return
	}
	switch d := mr.AsDuration(); {
	case d <= 0:
		c.add("max_runtime", "must be positive when set (got %s); leave it unset for no limit", d)
	case d > MaxRuntimeLimit:
		c.add("max_runtime", "must be at most %s (30 days) (got %s)", MaxRuntimeLimit, d)
	}
}
