package e2eutil

import (
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
