package server

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"
)

// The hub retries ensuring its NATS streams at start instead of exiting
// on the first refusal: a NATS cluster that has just formed refuses
// replicated streams for a few seconds ("no suitable peers for
// placement"; found by the chaos soak, where a hub then exited). It still
// gives up after its limit, with the last error.
func TestRetryStartup(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	tries := 0
	err := retryStartup(ctx, log, "streams", 10*time.Second, func(context.Context) error {
		if tries++; tries < 3 {
			return errors.New("no suitable peers for placement")
		}
		return nil
	})
	if err != nil || tries != 3 {
		t.Fatalf("retryStartup = %v after %d tries, want success on the third", err, tries)
	}
	t0 := time.Now()
	err = retryStartup(ctx, log, "streams", 600*time.Millisecond, func(context.Context) error { return errors.New("still no peers") })
	if err == nil || err.Error() != "still no peers" || time.Since(t0) > 3*time.Second {
		t.Fatalf("retryStartup = %v after %s, want the last error within the limit", err, time.Since(t0))
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := retryStartup(cctx, log, "streams", time.Minute, func(context.Context) error { return errors.New("x") }); err == nil {
		t.Fatal("retryStartup on an ended context succeeded")
	}
}

// TestEnsureStreamsOutlivesTheConnectTimeout: the streams get their own
// time at start, not what is left of the hub's connect timeout, and a try
// that hangs is cut short and tried again. Found by the chaos soak: on a
// NATS cluster slow to answer, a restarted hub spent its connect timeout
// on one JetStream request and exited.
func TestEnsureStreamsOutlivesTheConnectTimeout(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond) // the connect budget, nearly spent
	defer cancel()
	tries := 0
	t0 := time.Now()
	err := ensureStreams(ctx, log, 5*time.Second, 200*time.Millisecond, func(c context.Context) error {
		if tries++; tries == 1 {
			<-c.Done() // the first request hangs
			return c.Err()
		}
		return nil
	})
	if err != nil || tries != 2 {
		t.Fatalf("ensureStreams = %v after %d tries, want success on the second", err, tries)
	}
	if d := time.Since(t0); d < 200*time.Millisecond || d > 3*time.Second {
		t.Fatalf("took %s: want the hung try cut at its 200 ms and a retry after the pause", d)
	}
}
