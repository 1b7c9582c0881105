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
