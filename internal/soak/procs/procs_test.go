package procs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func newGroup(t *testing.T) *Group {
	t.Helper()
	g, err := NewGroup(filepath.Join(t.TempDir(), "logs"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(time.Second) })
	return g
}

func start(t *testing.T, g *Group, name, path string, args ...string) *Proc {
	t.Helper()
	p, err := g.Start(Spec{Name: name, Path: path, Args: args})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// state is the process's state letter from /proc (R, S, T for stopped, Z).
func state(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// pid (comm) state ...: comm may hold spaces, so cut after the last ')'.
	s := string(b)
	return strings.Fields(s[strings.LastIndex(s, ")")+1:])[0]
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func TestKillIsACrash(t *testing.T) {
	g := newGroup(t)
	p := start(t, g, "sleeper", "sleep", "60")
	pid := p.Pid()
	if pid == 0 || !p.Running() {
		t.Fatalf("pid %d running %v, want a running process", pid, p.Running())
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if p.Running() || p.Pid() != 0 {
		t.Fatal("still running after Kill")
	}
	if err := p.ExitErr(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("exit %v, want killed", err)
	}
	if err := p.Kill(); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("second Kill = %v, want ErrNotRunning", err)
	}
	if log := p.Log(); !strings.Contains(log, "--- procs: start sleep [60]") || !strings.Contains(log, "sleeper exited (signal: killed)") {
		t.Fatalf("log does not record the start and the exit:\n%s", log)
	}
}

func TestPauseAndResume(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc")
	}
	g := newGroup(t)
	p := start(t, g, "sleeper", "sleep", "60")
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	waitState(t, p.Pid(), "T")
	if !p.Paused() {
		t.Fatal("Paused() false after Pause")
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	waitState(t, p.Pid(), "S")
	if p.Paused() {
		t.Fatal("Paused() true after Resume")
	}
	// A paused child still stops cleanly.
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if p.Running() {
		t.Fatal("paused child still running after Stop")
	}
}

func waitState(t *testing.T, pid int, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for state(t, pid) != want {
		if time.Now().After(deadline) {
			t.Fatalf("process %d in state %q, want %q", pid, state(t, pid), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStopEscalatesToSIGKILL(t *testing.T) {
	g := newGroup(t)
	// A child that ignores SIGTERM (the trap is set before it says so).
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	p := start(t, g, "stubborn", "sh", "-c", `trap '' TERM; touch `+ready+`; while :; do sleep 0.05; done`)
	if err := WaitFor(context.Background(), p, 5*time.Second, func(context.Context) error { _, err := os.Stat(ready); return err }); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := p.Stop(300 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < 300*time.Millisecond {
		t.Fatalf("stopped after %s, before the grace period: SIGTERM was not ignored?", d)
	}
	if p.Running() {
		t.Fatal("still running")
	}
	// A child that honours SIGTERM stops at once.
	q := start(t, g, "polite", "sleep", "60")
	t0 = time.Now()
	if err := q.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("SIGTERM took %s", d)
	}
	if err := q.Stop(time.Second); err != nil {
		t.Fatalf("Stop of a stopped child: %v", err)
	}
}

func TestRestartRunsTheSameCommandAgain(t *testing.T) {
	g := newGroup(t)
	p := start(t, g, "sleeper", "sleep", "60")
	first := p.Pid()
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	if p.Pid() == 0 || p.Pid() == first || p.Starts() != 2 {
		t.Fatalf("pid %d (first %d), starts %d: want a new process, 2 starts", p.Pid(), first, p.Starts())
	}
	if alive(first) {
		t.Fatalf("the first process %d survived Restart", first)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := p.Restart(); err != nil { // after an exit
		t.Fatal(err)
	}
	if !p.Running() || p.Starts() != 3 {
		t.Fatalf("running %v starts %d after restarting an exited child", p.Running(), p.Starts())
	}
	if n := strings.Count(p.Log(), "--- procs: start"); n != 3 {
		t.Fatalf("log records %d starts, want 3 (appended)", n)
	}
}

// TestSignalsReachTheWholeGroup: what a child started dies with it.
func TestSignalsReachTheWholeGroup(t *testing.T) {
	g := newGroup(t)
	pidFile := filepath.Join(t.TempDir(), "grandchild")
	p := start(t, g, "parent", "sh", "-c", `sleep 60 & echo $! > `+pidFile+`; wait`)
	var gc int
	if err := WaitFor(context.Background(), p, 5*time.Second, func(context.Context) error {
		b, err := os.ReadFile(pidFile)
		if err == nil {
			gc, err = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !alive(gc) {
		t.Fatal("grandchild not running")
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for alive(gc) && state(t, gc) != "Z" {
		if time.Now().After(deadline) {
			t.Fatalf("grandchild %d outlived its parent's SIGKILL", gc)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestWaitStopsWhenTheChildExits(t *testing.T) {
	g := newGroup(t)
	p := start(t, g, "quitter", "sh", "-c", "echo bye; exit 3")
	t0 := time.Now()
	err := WaitTCP(context.Background(), p, "127.0.0.1:1", 30*time.Second)
	if err == nil || !strings.Contains(err.Error(), "quitter exited (exit status 3) before it was ready") {
		t.Fatalf("WaitTCP = %v, want the exit", err)
	}
	if time.Since(t0) > 10*time.Second {
		t.Fatal("WaitTCP waited out its limit")
	}
	if !strings.Contains(p.Log(), "bye") {
		t.Fatalf("log lacks the child's output:\n%s", p.Log())
	}
}

func TestGroupNamesAndClose(t *testing.T) {
	g := newGroup(t)
	a := start(t, g, "a", "sleep", "60")
	b := start(t, g, "b", "sleep", "60")
	if _, err := g.Start(Spec{Name: "a", Path: "sleep", Args: []string{"1"}}); err == nil {
		t.Fatal("a second child named a was started")
	}
	if _, err := g.Start(Spec{Name: "c", Path: filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Fatal("a missing program started")
	}
	if got := strings.Join(g.Names(), ","); got != "a,b" {
		t.Fatalf("names %s, want a,b", got)
	}
	if g.Get("b") != b || g.Get("zz") != nil {
		t.Fatal("Get")
	}
	pids := []int{a.Pid(), b.Pid()}
	g.Close(2 * time.Second)
	for _, pid := range pids {
		if alive(pid) {
			t.Fatalf("process %d runs after Close", pid)
		}
	}
	if _, err := g.Start(Spec{Name: "d", Path: "sleep", Args: []string{"1"}}); err == nil {
		t.Fatal("Start after Close succeeded")
	}
}

func TestWaitHTTP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := WaitHTTP(ctx, nil, "http://127.0.0.1:1/readyz", 300*time.Millisecond); err == nil {
		t.Fatal("WaitHTTP on a closed port succeeded")
	}
}
