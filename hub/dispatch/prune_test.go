package dispatch

import (
	"testing"
	"time"
)

// A term forgets finished dispatches after forgetFinishedAfter and sent
// cancels after forgetAfter, and keeps what is younger.
func TestPruneForgetsByAge(t *testing.T) {
	now := time.Now()
	tm := &term{
		cancelled: map[string]time.Time{"c-old": now.Add(-forgetAfter - time.Minute), "c-mid": now.Add(-forgetFinishedAfter - time.Minute)},
		finished:  newFinishedMemory(),
		published: map[string]time.Time{},
	}
	tm.finished.PutUint64("f-old", uint64(now.Add(-forgetFinishedAfter-time.Minute).UnixNano()))
	tm.finished.PutUint64("f-new", uint64(now.Add(-time.Second).UnixNano()))
	(&Loop{}).prune(tm, &state{})
	if _, ok := tm.cancelled["c-old"]; ok {
		t.Error("a cancel older than forgetAfter is still remembered")
	}
	if _, ok := tm.cancelled["c-mid"]; !ok {
		t.Error("a cancel younger than forgetAfter was forgotten")
	}
	if tm.finished.Has("f-old") {
		t.Error("a finished dispatch older than forgetFinishedAfter is still remembered")
	}
	if !tm.finished.Has("f-new") {
		t.Error("a finished dispatch of a second ago was forgotten")
	}
}
