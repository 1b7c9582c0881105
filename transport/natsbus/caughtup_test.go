package natsbus

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestWatchAdvertsCaughtUp: CaughtUp closes only after the watch has
// handed over the latest advertisement of every cluster the stream held
// when it began (a hub must not take "not read yet" for "no such
// cluster"), and at once when the stream held none.
func TestWatchAdvertsCaughtUp(t *testing.T) {
	s := newServer(t)
	agent, hub := newBus(t, s), newBus(t, s)
	ctx := testCtx(t, 20*time.Second)

	empty, err := hub.WatchAdverts(ctx, func(string, []byte) {})
	if err != nil {
		t.Fatal(err)
	}
	waitClosed(t, empty.CaughtUp(), 3*time.Second, "CaughtUp on a stream without advertisements")
	empty.Stop()

	const clusters = 40
	for round := range 3 { // several per cluster: only the latest is replayed
		for c := range clusters {
			if err := agent.PublishAdvert(ctx, fmt.Sprintf("c%02d", c), fmt.Appendf(nil, "r%d", round)); err != nil {
				t.Fatal(err)
			}
		}
	}
	var (
		mu   sync.Mutex
		seen = map[string]string{}
	)
	sub, err := hub.WatchAdverts(ctx, func(c string, p []byte) {
		time.Sleep(time.Millisecond) // a slow reader: the replay takes a while
		mu.Lock()
		seen[c] = string(p)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	waitClosed(t, sub.CaughtUp(), 10*time.Second, "CaughtUp after the replay")
	mu.Lock()
	n, latest := len(seen), seen["c07"]
	mu.Unlock()
	if n != clusters || latest != "r2" {
		t.Fatalf("at CaughtUp the watch had handed over %d clusters (c07=%q), want all %d at r2", n, latest, clusters)
	}
	// A live advertisement still arrives after the replay.
	if err := agent.PublishAdvert(ctx, "c07", []byte("r3")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		mu.Lock()
		latest = seen["c07"]
		mu.Unlock()
		if latest == "r3" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("live advertisement not handed over: c07=%q", latest)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
