package natsbus

import (
	"context"
	"testing"
)

// A subscription's context normally has no deadline; subscribing must work
// with one (nats.go refuses to flush without a deadline).
func TestSubscribeHeartbeatsWithoutDeadline(t *testing.T) {
	b := newBus(t, newServer(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub, err := b.SubscribeHeartbeats(ctx, func(string, []byte) {})
	if err != nil {
		t.Fatalf("SubscribeHeartbeats with a context without deadline: %v", err)
	}
	sub.Stop()
}
