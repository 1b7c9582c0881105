package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Exec credential plugins print an ExecCredential on stdout. meridianctl
// accepts its own apiVersion and kubectl's, so existing kubectl plugins
// work unchanged.
const (
	execAPIVersion = "meridian.io/v1"
	execKind       = "ExecCredential"
	// execPluginTimeout bounds a non-interactive plugin.
	execPluginTimeout = time.Minute
	// execStderrLimit is how much of a failing plugin's stderr is shown.
	execStderrLimit = 2048
	// execStdoutLimit is the largest credential accepted.
	execStdoutLimit = 1 << 20
	// execExpirySkew renews a token this long before it expires.
	execExpirySkew = 10 * time.Second
)

var execAPIVersions = []string{execAPIVersion, "client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"}

// execCredential is the plugin's answer.
type execCredential struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Status     *struct {
		Token               string `json:"token"`
		ExpirationTimestamp string `json:"expirationTimestamp"`
	} `json:"status"`
}

// execToken runs the plugin when no unexpired token is cached; the cache
// lives for one meridianctl run.
type execToken struct {
	cfg  ExecConfig
	from string
	app  *app

	mu      sync.Mutex
	tok     string
	expires time.Time // zero: no expiry given
	runs    int
}

func (e *execToken) Token(ctx context.Context) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.tok != "" && (e.expires.IsZero() || e.app.env.Now().Add(execExpirySkew).Before(e.expires)) {
		return e.tok, nil
	}
	tok, exp, err := e.run(ctx)
	if err != nil {
		return "", err
	}
	e.tok, e.expires = tok, exp
	return tok, nil
}

func (e *execToken) Refresh() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.tok = ""
	return true
}

// run executes the plugin once and parses its answer.
func (e *execToken) run(ctx context.Context) (string, time.Time, error) {
	e.runs++
	if !e.cfg.Interactive {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, execPluginTimeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, e.cfg.Command, e.cfg.Args...)
	var env []string
	if e.app.env.Environ != nil {
		env = e.app.env.Environ()
	}
	for _, v := range e.cfg.Env {
		env = append(env, v.Name+"="+v.Value)
	}
	info, _ := json.Marshal(map[string]any{"apiVersion": execAPIVersion, "kind": execKind,
		"spec": map[string]any{"interactive": e.cfg.Interactive, "hub": e.app.hub}})
	cmd.Env = append(env, "MERIDIAN_EXEC_INFO="+string(info))
	var stdout limitedBuffer
	stdout.limit = execStdoutLimit
	var stderr limitedBuffer
	stderr.limit = execStderrLimit
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if e.cfg.Interactive {
		cmd.Stdin = e.app.env.Stdin
		cmd.Stderr = io.MultiWriter(&stderr, e.app.env.Stderr)
	}
	err := cmd.Run()
	if ctx.Err() != nil && err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return "", time.Time{}, e.fail(fmt.Sprintf("did not finish within %s", execPluginTimeout), &stderr)
		}
		return "", time.Time{}, &exitError{code: ExitInterrupted, msg: "interrupted", err: ctx.Err()}
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", time.Time{}, e.fail(fmt.Sprintf("exited with code %d", ee.ExitCode()), &stderr)
		}
		var nf *exec.Error
		if errors.As(err, &nf) {
			return "", time.Time{}, e.fail(fmt.Sprintf("cannot run it: %v (is it installed and on PATH?)", nf.Err), &stderr)
		}
		return "", time.Time{}, e.fail(fmt.Sprintf("cannot run it: %v", err), &stderr)
	}
	if stdout.over {
		return "", time.Time{}, e.fail(fmt.Sprintf("printed more than %d bytes", execStdoutLimit), &stderr)
	}
	return e.parse(stdout.Bytes(), &stderr)
}

// parse checks the plugin's answer. Its errors never quote stdout, which
// holds the token.
func (e *execToken) parse(out []byte, stderr *limitedBuffer) (string, time.Time, error) {
	var c execCredential
	dec := json.NewDecoder(bytes.NewReader(out))
	if err := dec.Decode(&c); err != nil {
		return "", time.Time{}, e.fail("did not print an ExecCredential as JSON on stdout", stderr)
	}
	okVersion := false
	for _, v := range execAPIVersions {
		okVersion = okVersion || c.APIVersion == v
	}
	if !okVersion {
		return "", time.Time{}, e.fail(fmt.Sprintf("printed apiVersion %q; want %s", truncate(c.APIVersion, 80), strings.Join(execAPIVersions, " or ")), stderr)
	}
	if c.Kind != execKind {
		return "", time.Time{}, e.fail(fmt.Sprintf("printed kind %q; want %s", truncate(c.Kind, 80), execKind), stderr)
	}
	if c.Status == nil || strings.TrimSpace(c.Status.Token) == "" {
		return "", time.Time{}, e.fail("printed no status.token", stderr)
	}
	tok := strings.TrimSpace(c.Status.Token)
	if strings.ContainsAny(tok, "\r\n") {
		return "", time.Time{}, e.fail("printed a status.token with a line break", stderr)
	}
	var exp time.Time
	if ts := c.Status.ExpirationTimestamp; ts != "" {
		t, err := time.Parse(time.RFC3339, ts)
		if err != nil {
			return "", time.Time{}, e.fail(fmt.Sprintf("printed status.expirationTimestamp %q, not RFC 3339", truncate(ts, 80)), stderr)
		}
		exp = t
	}
	return tok, exp, nil
}

// fail is a plugin error: exit code 7, the plugin's stderr shown.
func (e *execToken) fail(what string, stderr *limitedBuffer) error {
	msg := fmt.Sprintf("exec credential plugin %q (%s) %s", e.cfg.Command, e.from, what)
	if s := strings.TrimSpace(stderr.String()); s != "" {
		if stderr.over {
			s += "\n[stderr truncated]"
		}
		msg += "; its stderr:\n  " + strings.ReplaceAll(s, "\n", "\n  ")
	}
	return &exitError{code: ExitDenied, msg: msg}
}

// limitedBuffer keeps the first limit bytes written and notes the rest.
// The buffer is a field, not embedded, so that io.Copy cannot bypass
// Write through bytes.Buffer's ReadFrom.
type limitedBuffer struct {
	buf   bytes.Buffer
	limit int
	over  bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	room := b.limit - b.buf.Len()
	if room <= 0 {
		b.over = b.over || len(p) > 0
		return len(p), nil
	}
	if len(p) > room {
		b.over = true
		b.buf.Write(p[:room])
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *limitedBuffer) Bytes() []byte  { return b.buf.Bytes() }
func (b *limitedBuffer) String() string { return b.buf.String() }

// truncate shortens s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
