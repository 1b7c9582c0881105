package vaultlocal

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/vault/api"
)

// Version is the Vault version tools/vault/build.sh builds; keep the two
// in step.
const Version = "v1.21.0"

// RootToken is the root token of the servers Start and StartServer start,
// unless Options.Token says otherwise.
const RootToken = "root"

// ErrNotBuilt: there is no vault binary (not built, or MERIDIAN_VAULT_BIN
// names a missing file). Callers skip (a test, unless
// MERIDIAN_REQUIRE_VAULT=1) or say so.
var ErrNotBuilt = errors.New("vault is not built")

// ErrNotRunning: Running found no answering server of scripts/vault-up.sh.
var ErrNotRunning = errors.New("no vault started by scripts/vault-up.sh is running")

// CacheDir is where tools/vault/build.sh puts the binary (bin/vault) and
// its stamp: MERIDIAN_VAULT_CACHE, else ~/.cache/meridian/vault-<Version>.
func CacheDir() string {
	if d := os.Getenv("MERIDIAN_VAULT_CACHE"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "meridian", "vault-"+Version)
}

// Binary returns the vault binary: MERIDIAN_VAULT_BIN when set, else the
// one tools/vault/build.sh built into CacheDir. It returns an error
// wrapping ErrNotBuilt, which says how to build it, when there is none.
func Binary() (string, error) {
	if p := os.Getenv("MERIDIAN_VAULT_BIN"); p != "" {
		if !isExecutable(p) {
			return "", fmt.Errorf("%w: MERIDIAN_VAULT_BIN=%s is not an executable file", ErrNotBuilt, p)
		}
		return p, nil
	}
	p := filepath.Join(CacheDir(), "bin", "vault")
	if !isExecutable(p) {
		return "", fmt.Errorf("%w: no %s; run `bash tools/vault/build.sh` once (a long cold build, see its header), or set MERIDIAN_VAULT_BIN", ErrNotBuilt, p)
	}
	return p, nil
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// Options of StartServer. The zero value is a server with the root token
// RootToken, from Binary(), logging to a temporary file.
type Options struct {
	// Binary is the vault binary; empty means Binary().
	Binary string
	// Token is the root token; empty means RootToken.
	Token string
	// LogPath is the file the server's output goes to (created or
	// truncated); empty means a new file in the system's temp dir, removed
	// by Stop.
	LogPath string
}

// Server is a running Vault dev server.
type Server struct {
	// Addr is its API address, http://127.0.0.1:PORT.
	Addr string
	// Token is its root token.
	Token string
	// LogPath is the file its output goes to.
	LogPath string

	cmd     *exec.Cmd // nil for a server of scripts/vault-up.sh
	exited  chan struct{}
	waitErr error
	tmpLog  bool
	once    sync.Once
	stopErr error
}

// Start starts a private dev server for t and stops it at t's cleanup. It
// skips t when the binary is missing, or fails it when
// MERIDIAN_REQUIRE_VAULT=1; it fails t when the server does not come up.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		skipOrFail(t, err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := StartServer(ctx, Options{Binary: bin, LogPath: filepath.Join(t.TempDir(), "vault.log")})
	if err != nil {
		t.Fatalf("vault dev server: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("vault dev server log (%s), last lines:\n%s", s.LogPath, s.LogTail(4000))
		}
		if err := s.Stop(); err != nil {
			t.Errorf("stop vault: %v", err)
		}
	})
	return s
}

// skipOrFail skips t (msg says why) or, under MERIDIAN_REQUIRE_VAULT=1,
// fails it: the rule of every MERIDIAN_REQUIRE_<PART>.
func skipOrFail(t testing.TB, msg string) {
	t.Helper()
	const env = "MERIDIAN_REQUIRE_VAULT"
	if os.Getenv(env) == "1" {
		t.Fatalf("%s=1 and %s", env, msg)
	}
	t.Skipf("SKIPPING the Vault tests: %s (set %s=1 to make this a failure)", msg, env)
}

// StartServer starts `vault server -dev` on a free loopback port (and the
// next one, Vault's cluster listener) and returns once /v1/sys/health
// answers 200 (initialised, unsealed, active). The caller must Stop it.
// A port taken in between by someone else is retried on another.
func StartServer(ctx context.Context, opts Options) (*Server, error) {
	if opts.Binary == "" {
		bin, err := Binary()
		if err != nil {
			return nil, err
		}
		opts.Binary = bin
	}
	if opts.Token == "" {
		opts.Token = RootToken
	}
	tmpLog := false
	if opts.LogPath == "" {
		f, err := os.CreateTemp("", "meridian-vault-*.log")
		if err != nil {
			return nil, fmt.Errorf("vault log file: %w", err)
		}
		f.Close()
		opts.LogPath, tmpLog = f.Name(), true
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePortPair()
		if err != nil {
			return nil, err
		}
		s, err := startOnce(ctx, opts, port)
		if err == nil {
			s.tmpLog = tmpLog
			return s, nil
		}
		lastErr = err
		if !errors.Is(err, errPortTaken) || ctx.Err() != nil {
			break
		}
	}
	if tmpLog {
		os.Remove(opts.LogPath)
	}
	return nil, lastErr
}

var errPortTaken = errors.New("port taken")

func startOnce(ctx context.Context, opts Options, port int) (*Server, error) {
	logf, err := os.Create(opts.LogPath)
	if err != nil {
		return nil, fmt.Errorf("vault log file: %w", err)
	}
	defer logf.Close() // the child has its own copy
	listen := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(opts.Binary, "server", "-dev",
		"-dev-root-token-id="+opts.Token,
		"-dev-listen-address="+listen,
		"-dev-no-store-token")
	cmd.Env = serverEnv()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", opts.Binary, err)
	}
	s := &Server{Addr: "http://" + listen, Token: opts.Token, LogPath: opts.LogPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()
	if err := s.waitHealthy(ctx); err != nil {
		_ = s.Stop()
		tail := s.LogTail(2000)
		if strings.Contains(tail, "address already in use") {
			return nil, fmt.Errorf("%w: %s", errPortTaken, listen)
		}
		return nil, fmt.Errorf("%w; log %s:\n%s", err, opts.LogPath, tail)
	}
	return s, nil
}

// serverEnv is this process's environment without VAULT_* variables (a
// VAULT_TOKEN, VAULT_ADDR or VAULT_CLUSTER_ADDR of the caller's would
// change the dev server), so every server starts the same.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VAULT_") {
			env = append(env, kv)
		}
	}
	return env
}

// waitHealthy polls /v1/sys/health until it answers 200, the process
// exits, or a minute (or ctx) runs out.
func (s *Server) waitHealthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second}
	var last string
	for {
		code, err := health(ctx, hc, s.Addr)
		if err == nil && code == http.StatusOK {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = "HTTP " + strconv.Itoa(code)
		}
		select {
		case <-s.exited:
			return fmt.Errorf("vault exited before it was ready: %v", s.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("vault at %s not ready (/v1/sys/health: %s): %w", s.Addr, last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func health(ctx context.Context, hc *http.Client, addr string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, addr+"/v1/sys/health", nil)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// freePortPair returns a loopback port p with p+1 free too (the dev
// server's cluster listener takes the API port plus one).
func freePortPair() (int, error) {
	for range 50 {
		l1, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("free port: %w", err)
		}
		p := l1.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1))
		l1.Close()
		if err != nil {
			continue
		}
		l2.Close()
		return p, nil
	}
	return 0, errors.New("free port: no free pair of loopback ports found")
}

// Stop stops a server StartServer started: SIGTERM, then SIGKILL after ten
// seconds, and waits for it to exit. It is idempotent and safe to call
// concurrently. A server of scripts/vault-up.sh is left running
// (scripts/vault-down.sh stops it).
func (s *Server) Stop() error {
	if s.cmd == nil {
		return nil
	}
	s.once.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			select {
			case <-s.exited:
			case <-time.After(5 * time.Second):
				s.stopErr = fmt.Errorf("vault (pid %d) did not exit after SIGKILL", s.cmd.Process.Pid)
			}
		}
		if s.tmpLog {
			os.Remove(s.LogPath)
		}
	})
	return s.stopErr
}

// LogTail returns the last n bytes of the server's log.
func (s *Server) LogTail(n int) string {
	f, err := os.Open(s.LogPath)
	if err != nil {
		return fmt.Sprintf("(log %s: %v)", s.LogPath, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > int64(n) {
		_, _ = f.Seek(st.Size()-int64(n), io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// Client returns a Vault API client for the server, with its root token.
func (s *Server) Client() (*api.Client, error) {
	cfg := api.DefaultConfig()
	if cfg.Error != nil {
		return nil, fmt.Errorf("vault client config: %w", cfg.Error)
	}
	cfg.Address = s.Addr
	cfg.MaxRetries = 0
	c, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("vault client: %w", err)
	}
	c.SetToken(s.Token)
	return c, nil
}

// StateDir is where scripts/vault-up.sh keeps its state (env file, log,
// pid): MERIDIAN_VAULT_DIR, else ~/.cache/meridian/vault.
func StateDir() string {
	if d := os.Getenv("MERIDIAN_VAULT_DIR"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "meridian", "vault")
}

// Running returns the shared server scripts/vault-up.sh started, read from
// its env file, once its /v1/sys/health answers 200; else an error
// wrapping ErrNotRunning. Its data is shared with whoever else uses it, so
// tests prefer Start; Stop leaves it running.
func Running(ctx context.Context) (*Server, error) {
	envPath := filepath.Join(StateDir(), "env")
	vars, err := envFile(envPath)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotRunning, err)
	}
	s := &Server{Addr: vars["MERIDIAN_VAULT_ADDR"], Token: vars["MERIDIAN_VAULT_TOKEN"], LogPath: filepath.Join(StateDir(), "vault.log")}
	if s.Addr == "" || s.Token == "" {
		return nil, fmt.Errorf("%w: %s has no MERIDIAN_VAULT_ADDR or MERIDIAN_VAULT_TOKEN", ErrNotRunning, envPath)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	code, err := health(ctx, &http.Client{}, s.Addr)
	if err != nil || code != http.StatusOK {
		return nil, fmt.Errorf("%w: %s/v1/sys/health: code %d, %v", ErrNotRunning, s.Addr, code, err)
	}
	return s, nil
}

// envFile reads the KEY=value lines ("export " optional) of vault-up's env
// file.
func envFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimPrefix(strings.TrimSpace(sc.Text()), "export ")
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(k, "#") {
			out[k] = strings.Trim(v, `"`)
		}
	}
	return out, sc.Err()
}
