package bench

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// procUsage is what a process has used so far: CPU time in user space and
// in the kernel, and minor page faults (a page touched for the first time,
// or again after the runtime gave it back). The kernel's share and the
// faults tell a workload's cost in system calls and fresh memory from its
// cost in the product's code.
type procUsage struct {
	user, sys time.Duration
	faults    int64
}

func (u procUsage) plus(v procUsage) procUsage {
	return procUsage{u.user + v.user, u.sys + v.sys, u.faults + v.faults}
}

func (u procUsage) minus(v procUsage) procUsage {
	return procUsage{u.user - v.user, u.sys - v.sys, u.faults - v.faults}
}

func (u procUsage) cpu() time.Duration { return u.user + u.sys }

// report adds the usage per workload to b's metrics: cpu-ms/workload (all
// of it), cpu-sys-ms/workload (the kernel's part) and faults/workload.
func (u procUsage) report(b *testing.B, n int) {
	if n <= 0 {
		return
	}
	per := func(d time.Duration) float64 { return d.Seconds() * 1000 / float64(n) }
	b.ReportMetric(per(u.cpu()), "cpu-ms/workload")
	b.ReportMetric(per(u.sys), "cpu-sys-ms/workload")
	b.ReportMetric(float64(u.faults)/float64(n), "faults/workload")
}

// selfUsage is this process's usage (Linux /proc; zero elsewhere).
func selfUsage() procUsage { return readProcUsage("/proc/self/stat") }

// readProcUsage reads a /proc/PID/stat file; zero when it cannot.
func readProcUsage(path string) procUsage {
	raw, err := os.ReadFile(path)
	if err != nil {
		return procUsage{}
	}
	return parseProcStat(string(raw))
}

// parseProcStat reads utime, stime and minflt from a /proc/PID/stat line
// (proc(5)); zero when the line is not one. The command name may hold
// spaces and parentheses, so the fields are counted from after its last
// closing parenthesis, where the state (field 3) comes first.
func parseProcStat(s string) procUsage {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procUsage{}
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return procUsage{}
	}
	minflt, err1 := strconv.ParseInt(f[7], 10, 64)
	utime, err2 := strconv.ParseInt(f[11], 10, 64)
	stime, err3 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return procUsage{}
	}
	const ticksPerSecond = 100 // USER_HZ on Linux
	tick := time.Second / ticksPerSecond
	return procUsage{user: time.Duration(utime) * tick, sys: time.Duration(stime) * tick, faults: minflt}
}

func TestParseProcStat(t *testing.T) {
	// A real line's shape, with a command name that holds a space and a
	// parenthesis.
	line := "4242 (bench (x).test) S 1 4242 4242 0 -1 4194560 1234 0 5 0 250 75 0 0 20 0 9 0 100 1000 200 18446744073709551615"
	u := parseProcStat(line)
	if u.faults != 1234 || u.user != 2500*time.Millisecond || u.sys != 750*time.Millisecond {
		t.Fatalf("parseProcStat = %+v, want faults 1234, user 2.5s, sys 750ms", u)
	}
	if u.cpu() != 3250*time.Millisecond {
		t.Fatalf("cpu = %s, want 3.25s", u.cpu())
	}
	for _, bad := range []string{"", "4242 (x) S 1 2", "4242 (x) S 1 2 3 4 5 6 notanumber 8 9 10 11 12 13"} {
		if got := parseProcStat(bad); got != (procUsage{}) {
			t.Errorf("parseProcStat(%q) = %+v, want zero", bad, got)
		}
	}
	if d := u.plus(u).minus(u); d != u {
		t.Errorf("plus then minus = %+v, want %+v", d, u)
	}
	if self := selfUsage(); self.cpu() <= 0 && fileExists("/proc/self/stat") {
		t.Errorf("selfUsage = %+v: no CPU time read from /proc/self/stat", self)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
