package server

import (
	"log/slog"
	"os"
	"runtime/debug"
)

// DefaultGCPercent is the garbage collector target the hub runs with
// unless GOGC is set. The hub's heap is mostly long-lived state (the watch
// cache, the decoded mirror, etcd's index); at Go's default of 100 the
// collector walks it twice as often as it needs to, and at 2,000
// workloads/s on two cores that was a fifth of the CPU and the cause of the
// latency tail (docs/benchmarks.md). 400 trades memory (the heap may grow
// to five times the live state) for that CPU.
const DefaultGCPercent = 400

// TuneGC sets the collector's target for a hub process: percent, unless
// the operator set GOGC, which wins. 0 or less leaves Go's default. It
// returns the setting in force.
func TuneGC(percent int, log *slog.Logger) int {
	if v, ok := os.LookupEnv("GOGC"); ok {
		if log != nil {
			log.Info("GOGC is set; the collector target is left to it", "GOGC", v)
		}
		return currentGCPercent()
	}
	if percent <= 0 {
		return currentGCPercent()
	}
	debug.SetGCPercent(percent)
	return percent
}

// currentGCPercent reads the collector's target (Go has no getter).
func currentGCPercent() int {
	old := debug.SetGCPercent(100)
	debug.SetGCPercent(old)
	return old
}
