package server

import (
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
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

// MemoryLimitShare is the part of the container's memory limit that
// TuneMemoryLimit gives the Go heap. The rest is for what the collector
// does not count: goroutine stacks, the embedded etcd's memory-mapped
// database pages, the JetStream file store's buffers.
const MemoryLimitShare = 0.9

// cgroupMemoryFiles are where the container's memory limit is read:
// cgroup v2, then v1.
var cgroupMemoryFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// TuneMemoryLimit gives the collector a soft memory limit of
// MemoryLimitShare of the container's memory limit, unless the operator
// set GOMEMLIMIT, which wins. Without it, a heap allowed to grow to five
// times its live state (DefaultGCPercent) meets the container's limit as
// an OOM kill; with it, the collector works harder as the heap nears the
// limit instead. No limit (a host process, or "max") leaves Go's default.
// It returns the limit in force, math.MaxInt64 for none.
func TuneMemoryLimit(log *slog.Logger) int64 {
	return tuneMemoryLimit(log, cgroupMemoryFiles)
}

func tuneMemoryLimit(log *slog.Logger, files []string) int64 {
	if v, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		if log != nil {
			log.Info("GOMEMLIMIT is set; the collector's memory limit is left to it", "GOMEMLIMIT", v)
		}
		return debug.SetMemoryLimit(-1)
	}
	limit, from := containerMemoryLimit(files)
	if limit <= 0 {
		return debug.SetMemoryLimit(-1)
	}
	soft := int64(float64(limit) * MemoryLimitShare)
	debug.SetMemoryLimit(soft)
	if log != nil {
		log.Info("collector memory limit set from the container's", "limit_bytes", soft, "container_limit_bytes", limit, "from", from)
	}
	return soft
}

// containerMemoryLimit reads the first limit found in files; 0 when none
// is set ("max", a missing file, or a value too large to be a real limit).
func containerMemoryLimit(files []string) (int64, string) {
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, f
		}
		n, err := strconv.ParseInt(s, 10, 64)
		// cgroup v1 reports "no limit" as a huge page-aligned number.
		if err != nil || n <= 0 || n >= 1<<60 {
			return 0, f
		}
		return n, f
	}
	return 0, ""
}
