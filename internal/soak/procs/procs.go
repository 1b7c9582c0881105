package procs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"
)

// ErrNotRunning is returned by an operation that needs a live process.
var ErrNotRunning = errors.New("procs: process is not running")

// Spec is how to run one child.
type Spec struct {
	// Name identifies the child in the group and names its log file
	// (<log dir>/<Name>.log). Required, unique in the group.
	Name string
	// Path is the program; Args its arguments (without the program).
	Path string
	Args []string
	// Env is added to the supervisor's environment.
	Env []string
	// Dir is the working directory; empty: the supervisor's.
	Dir string
}

// Group is a set of supervised children sharing a log directory. It is safe
// for concurrent use.
type Group struct {
	logDir string

	mu     sync.Mutex
	procs  map[string]*Proc
	closed bool
}

// NewGroup returns a group whose children log to logDir (made if missing).
func NewGroup(logDir string) (*Group, error) {
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("procs: log dir: %w", err)
	}
	return &Group{logDir: logDir, procs: map[string]*Proc{}}, nil
}

// LogDir is where the children's logs are.
func (g *Group) LogDir() string { return g.logDir }

// Start runs spec as a new child and returns it once the process exists
// (not once it is ready: see WaitHTTP, WaitTCP, WaitFor).
func (g *Group) Start(spec Spec) (*Proc, error) {
	if spec.Name == "" || spec.Path == "" {
		return nil, errors.New("procs: Spec.Name and Spec.Path are required")
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, errors.New("procs: group is closed")
	}
	if _, ok := g.procs[spec.Name]; ok {
		g.mu.Unlock()
		return nil, fmt.Errorf("procs: a child named %q exists already", spec.Name)
	}
	p := &Proc{spec: spec, logPath: filepath.Join(g.logDir, spec.Name+".log")}
	g.procs[spec.Name] = p
	g.mu.Unlock()
	if err := p.start(); err != nil {
		g.mu.Lock()
		delete(g.procs, spec.Name)
		g.mu.Unlock()
		return nil, err
	}
	return p, nil
}

// Get returns the child named name, or nil.
func (g *Group) Get(name string) *Proc {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.procs[name]
}

// Names lists the children, sorted.
func (g *Group) Names() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]string, 0, len(g.procs))
	for n := range g.procs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Close stops every child at once (SIGTERM, then SIGKILL after grace) and
// refuses further starts. No child runs after it returns. It is
// idempotent.
func (g *Group) Close(grace time.Duration) {
	g.mu.Lock()
	g.closed = true
	procs := make([]*Proc, 0, len(g.procs))
	for _, p := range g.procs {
		procs = append(procs, p)
	}
	g.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() { defer wg.Done(); _ = p.Stop(grace) }()
	}
	wg.Wait()
}

// Proc is one supervised child, across its restarts.
type Proc struct {
	spec    Spec
	logPath string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed when the current process has exited
	err    error         // its exit, once done
	paused bool
	starts int
}

// Name is the child's name.
func (p *Proc) Name() string { return p.spec.Name }

// LogPath is the child's log file (stdout and stderr, every run appended).
func (p *Proc) LogPath() string { return p.logPath }

// Starts counts how many times the child was started.
func (p *Proc) Starts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

func (p *Proc) start() error {
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("procs: %s: log: %w", p.spec.Name, err)
	}
	fmt.Fprintf(log, "--- procs: start %s %v at %s\n", p.spec.Path, p.spec.Args, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.spec.Path, p.spec.Args...)
	cmd.Dir = p.spec.Dir
	cmd.Env = append(os.Environ(), p.spec.Env...)
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("procs: start %s: %w", p.spec.Name, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.err, p.paused = cmd, done, nil, false
	p.starts++
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(log, "--- procs: %s exited (%v) at %s\n", p.spec.Name, exitText(err), time.Now().Format(time.RFC3339Nano))
		log.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func exitText(err error) string {
	if err == nil {
		return "status 0"
	}
	return err.Error()
}

// Pid is the current process's id, 0 when it is not running.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.exited() {
		return 0
	}
	return p.cmd.Process.Pid
}

// exited reports whether the current process has exited; p.mu held.
func (p *Proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Running reports whether the current process has not exited (a paused
// process is running).
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !p.exited()
}

// Paused reports whether the process was paused and not resumed.
func (p *Proc) Paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused && !p.exited()
}

// Done is closed when the current process exits.
func (p *Proc) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// ExitErr is how the last process exited (nil: status 0), once Done.
func (p *Proc) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// signal sends sig to the current process's group.
func (p *Proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.exited() {
		return fmt.Errorf("%s: %w", p.spec.Name, ErrNotRunning)
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("procs: signal %v to %s: %w", sig, p.spec.Name, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		p.paused = false
	}
	return nil
}

// Kill sends SIGKILL to the child's process group and waits until the
// process has exited: a crash. It fails with ErrNotRunning when it was not
// running.
func (p *Proc) Kill() error {
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.Done()
	return nil
}

// Pause sends SIGSTOP to the child's process group: it keeps its sockets
// and memory but runs no code until Resume.
func (p *Proc) Pause() error { return p.signal(syscall.SIGSTOP) }

// Resume sends SIGCONT to the child's process group.
func (p *Proc) Resume() error { return p.signal(syscall.SIGCONT) }

// Stop asks the child to stop (SIGTERM; a paused child is resumed so that
// it can) and sends SIGKILL when it has not exited after grace. Stopping a
// child that is not running does nothing.
func (p *Proc) Stop(grace time.Duration) error {
	if err := p.signal(syscall.SIGTERM); err != nil {
		if errors.Is(err, ErrNotRunning) {
			return nil
		}
		return err
	}
	_ = p.signal(syscall.SIGCONT)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.Done():
		return nil
	case <-t.C:
	}
	if err := p.Kill(); err != nil && !errors.Is(err, ErrNotRunning) {
		return err
	}
	return nil
}

// Restart starts the child again with the same command line, appending to
// its log. A running child is killed first (SIGKILL), as a crash and an
// immediate restart would.
func (p *Proc) Restart() error {
	if err := p.Kill(); err != nil && !errors.Is(err, ErrNotRunning) {
		return err
	}
	return p.start()
}

// Log returns the child's log as written so far.
func (p *Proc) Log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// LogTail returns at most the last n bytes of the child's log.
func (p *Proc) LogTail(n int) string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > int64(n) {
		_, _ = f.Seek(st.Size()-int64(n), io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// WaitFor calls check every interval until it returns nil, and fails with
// its last error when limit passes, when ctx ends, or when p (if not nil)
// exits first.
func WaitFor(ctx context.Context, p *Proc, limit time.Duration, check func(context.Context) error) error {
	deadline := time.Now().Add(limit)
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = check(cctx)
		cancel()
		if last == nil {
			return nil
		}
		var exited <-chan struct{}
		if p != nil {
			exited = p.Done()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %s: %w", limit, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-exited:
			return fmt.Errorf("%s exited (%v) before it was ready (last: %v); log %s", p.Name(), exitText(p.ExitErr()), last, p.LogPath())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitHTTP waits until url answers 200 (a /readyz).
func WaitHTTP(ctx context.Context, p *Proc, url string, limit time.Duration) error {
	return WaitFor(ctx, p, limit, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	})
}

// WaitTCP waits until addr accepts a connection.
func WaitTCP(ctx context.Context, p *Proc, addr string, limit time.Duration) error {
	return WaitFor(ctx, p, limit, func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	})
}
