package e2eutil

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

// Concurrent writers never lose the newest lines, and the buffer stays
// bounded.
func TestLogBufferKeepsTheNewestBounded(t *testing.T) {
	var b LogBuffer
	var wg sync.WaitGroup
	line := strings.Repeat("x", 1023) + "\n"
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3000 {
				_, _ = b.Write([]byte(line))
			}
		}()
	}
	wg.Wait()
	_, _ = b.Write([]byte("last line\n"))
	if got := b.Tail(10); got != "last line\n" {
		t.Fatalf("tail %q", got)
	}
	if n := len(b.Tail(1 << 30)); n > logCap+len(line) || n < logCap/2 {
		t.Fatalf("buffer holds %d bytes, want between %d and %d", n, logCap/2, logCap+len(line))
	}
}

// A missing component skips every test that needs it, and Start runs once;
// a working one is handed to every test.
func TestSharedStartsOnceAndSkipsWhenMissing(t *testing.T) {
	if testing.Short() {
		t.Skip("Shared skips everything under -short")
	}
	t.Setenv("MERIDIAN_REQUIRE_E2EUTILTEST", "")
	starts := 0
	missing := &Shared[int]{Part: "E2EUTILTEST", What: "test", Component: "nothing",
		Start: func() (*int, error) { starts++; return nil, errors.New("absent here") }}
	for _, name := range []string{"first", "second"} {
		var skipped bool
		t.Run(name, func(t *testing.T) {
			defer func() { skipped = t.Skipped() }()
			missing.Need(t)
			t.Error("Need returned for a missing component")
		})
		if !skipped {
			t.Fatalf("%s: not skipped", name)
		}
	}
	if starts != 1 {
		t.Fatalf("Start ran %d times, want once", starts)
	}
	v := 7
	ok := &Shared[int]{Part: "E2EUTILTEST", What: "test", Component: "nothing", Start: func() (*int, error) { return &v, nil }}
	if a, b := ok.Need(t), ok.Need(t); a != &v || b != &v || ok.Started() != &v {
		t.Fatal("Need did not hand out the one fixture")
	}
}
