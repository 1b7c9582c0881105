package server

import (
	"os"
	"runtime/debug"
	"testing"
)

func TestTuneGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Run("without GOGC the hub's default applies", func(t *testing.T) {
		unsetenv(t, "GOGC")
		debug.SetGCPercent(100)
		if got := TuneGC(DefaultGCPercent, nil); got != DefaultGCPercent || currentGCPercent() != DefaultGCPercent {
			t.Fatalf("TuneGC = %d, collector at %d; want %d", got, currentGCPercent(), DefaultGCPercent)
		}
	})
	t.Run("GOGC wins", func(t *testing.T) {
		t.Setenv("GOGC", "150")
		debug.SetGCPercent(150)
		if got := TuneGC(DefaultGCPercent, nil); got != 150 || currentGCPercent() != 150 {
			t.Fatalf("TuneGC = %d, collector at %d; want GOGC's 150 kept", got, currentGCPercent())
		}
	})
	t.Run("zero leaves the setting", func(t *testing.T) {
		unsetenv(t, "GOGC")
		debug.SetGCPercent(120)
		if got := TuneGC(0, nil); got != 120 || currentGCPercent() != 120 {
			t.Fatalf("TuneGC(0) = %d, collector at %d; want 120 kept", got, currentGCPercent())
		}
	})
}

// unsetenv removes key for the rest of the test (t.Setenv first, so that
// the original value comes back afterwards).
func unsetenv(t *testing.T, key string) {
	t.Helper()
	t.Setenv(key, "")
	if err := os.Unsetenv(key); err != nil {
		t.Fatal(err)
	}
}
