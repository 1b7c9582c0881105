package natsbus

import (
	"context"
	"testing"
	"time"

	embednats "github.com/meridian-gpu/meridian/internal/embedded/nats"
)

// newServer starts an embedded NATS server with JetStream for one test.
func newServer(t testing.TB) *embednats.Server {
	t.Helper()
	s, err := embednats.Start(embednats.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// newBus connects to s, ensures the streams and closes the bus at test end.
func newBus(t testing.TB, s *embednats.Server, opts ...Option) *Bus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	base := []Option{WithNakBackoff(10*time.Millisecond, 100*time.Millisecond), WithReconnectWait(20 * time.Millisecond)}
	b, err := Connect(ctx, s.ClientURL(), append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := b.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	return b
}

// waitClosed fails the test unless ch is closed within d.
func waitClosed(t testing.TB, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s: not within %s", what, d)
	}
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// recorder collects deliveries from a handler.
type recorder struct {
	ch chan Delivery
}

func newRecorder() *recorder { return &recorder{ch: make(chan Delivery, 1000)} }

func (r *recorder) next(t testing.TB, within time.Duration) Delivery {
	t.Helper()
	select {
	case d := <-r.ch:
		return d
	case <-time.After(within):
		t.Fatalf("no delivery within %s", within)
		return Delivery{}
	}
}

// none asserts nothing arrives for d.
func (r *recorder) none(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case got := <-r.ch:
		t.Fatalf("unexpected delivery %s (msg id %s, delivery %d)", got.Subject, got.MsgID, got.NumDelivered)
	case <-time.After(d):
	}
}
