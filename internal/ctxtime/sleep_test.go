package ctxtime

import (
	"context"
	"testing"
	"time"
)

func TestSleep(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	if !Sleep(ctx, 20*time.Millisecond) || time.Since(start) < 20*time.Millisecond {
		t.Fatal("Sleep did not wait its duration on a live context")
	}
	if !Sleep(ctx, 0) || !Sleep(ctx, -time.Second) {
		t.Fatal("a non-positive wait on a live context must report true")
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	start = time.Now()
	if Sleep(done, time.Hour) || time.Since(start) > time.Second {
		t.Fatal("Sleep on an ended context must return false at once")
	}
	if Sleep(done, 0) {
		t.Fatal("a zero wait on an ended context must report false")
	}
}
