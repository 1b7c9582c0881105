package ctxtime

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends; it reports whether d passed with ctx
// still live. A d of 0 or less does not wait.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
