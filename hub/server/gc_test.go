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

func TestTuneMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	write := func(content string) string {
		f := t.TempDir() + "/memory.max"
		if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	const none = int64(^uint64(0) >> 1)
	for _, tc := range []struct {
		name    string
		content string // "" for no file
		env     string // GOMEMLIMIT; "" for unset
		want    int64
	}{
		{"a container limit", "4294967296\n", "", 4294967296 * 9 / 10},
		{"no limit (v2)", "max\n", "", none},
		{"no limit (v1's huge number)", "9223372036854771712\n", "", none},
		{"no cgroup file", "", "", none},
		{"garbage", "lots\n", "", none},
		{"GOMEMLIMIT wins", "4294967296\n", "1GiB", 1 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetMemoryLimit(none)
			unsetenv(t, "GOMEMLIMIT")
			if tc.env != "" {
				t.Setenv("GOMEMLIMIT", tc.env)
				debug.SetMemoryLimit(1 << 30) // what the runtime read at start
			}
			files := []string{t.TempDir() + "/missing"}
			if tc.content != "" {
				files = append(files, write(tc.content))
			}
			if got := tuneMemoryLimit(nil, files); got != tc.want || debug.SetMemoryLimit(-1) != tc.want {
				t.Fatalf("limit %d (collector at %d), want %d", got, debug.SetMemoryLimit(-1), tc.want)
			}
		})
	}
}
