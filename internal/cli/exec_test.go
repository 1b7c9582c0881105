package cli

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// TestHelperProcess is not a test: it is the exec credential plugin the
// tests below run, the test binary re-executed with
// GO_WANT_HELPER_PROCESS=1. HELPER_MODE says what it prints; each run
// appends a line to HELPER_COUNT_FILE and its token is plugin-token-N for
// the Nth run.
func TestHelperProcess(t *testing.T) {
	if os.Getenv("GO_WANT_HELPER_PROCESS") != "1" {
		return
	}
	n := 1
	if f := os.Getenv("HELPER_COUNT_FILE"); f != "" {
		old, _ := os.ReadFile(f)
		n = strings.Count(string(old), "\n") + 1
		_ = os.WriteFile(f, append(old, "run\n"...), 0o600)
	}
	tok := fmt.Sprintf("plugin-token-%d", n)
	cred := func(apiVersion, token string) {
		exp := ""
		if e := os.Getenv("HELPER_EXPIRY"); e != "" {
			exp = fmt.Sprintf(`,"expirationTimestamp":%q`, e)
		}
		fmt.Printf(`{"apiVersion":%q,"kind":"ExecCredential","status":{"token":%q%s}}`+"\n", apiVersion, token, exp)
	}
	switch os.Getenv("HELPER_MODE") {
	case "ok":
		cred("meridian.io/v1", tok)
	case "kubectl":
		cred("client.authentication.k8s.io/v1", tok)
	case "stdin":
		line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
		if strings.TrimSpace(line) == "" {
			fmt.Fprintln(os.Stderr, "nothing typed")
			os.Exit(1)
		}
		cred("meridian.io/v1", strings.TrimSpace(line))
	case "fail":
		fmt.Fprint(os.Stderr, "login required: run sso-login first\n"+strings.Repeat("x", 5000))
		os.Exit(3)
	case "badjson":
		fmt.Println("token=plugin-secret-in-garbage")
	case "wrongkind":
		fmt.Println(`{"apiVersion":"meridian.io/v1","kind":"Token","status":{"token":"plugin-secret-wrong-kind"}}`)
	}
	os.Exit(0)
}

// pluginConfig writes a configuration whose current context runs the
// helper plugin in mode, against addr, and returns its path and the run
// counter file.
func pluginConfig(t *testing.T, addr, mode, expiry string, interactive bool) (cfg, counter string) {
	t.Helper()
	dir := t.TempDir()
	counter = filepath.Join(dir, "runs")
	cfg = writeFile(t, dir, "config.yaml", fmt.Sprintf(`apiVersion: meridian.io/v1
kind: Config
currentContext: sso
contexts:
  - name: sso
    hub: %s
    exec:
      command: %s
      args: ["-test.run=TestHelperProcess", "--"]
      interactive: %t
      env:
        - {name: GO_WANT_HELPER_PROCESS, value: "1"}
        - {name: HELPER_MODE, value: %q}
        - {name: HELPER_COUNT_FILE, value: %q}
        - {name: HELPER_EXPIRY, value: %q}
`, addr, os.Args[0], interactive, mode, counter, expiry), 0o600)
	return cfg, counter
}

func pluginRuns(t *testing.T, counter string) int {
	t.Helper()
	b, err := os.ReadFile(counter)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

func pluginHub(t *testing.T, accept ...string) (*fakeHub, string) {
	t.Helper()
	h := newFakeHub()
	h.seed()
	h.auth.tokens = map[string]*meridianv1.Principal{}
	for _, tok := range accept {
		h.auth.tokens[tok] = &meridianv1.Principal{User: "sso-user", Method: "oidc"}
	}
	return h, h.serve(t)
}

// expiryAt is an RFC 3339 time relative to the CLI's clock in tests.
func expiryAt(d time.Duration) string { return t0.Add(time.Hour + d).Format(time.RFC3339) }

// A token is cached for the run until it expires: three pages, one run.
func TestExecPluginCachesToken(t *testing.T) {
	for _, mode := range []string{"ok", "kubectl"} {
		t.Run(mode, func(t *testing.T) {
			h, addr := pluginHub(t, "plugin-token-1")
			cfg, counter := pluginConfig(t, addr, mode, expiryAt(time.Hour), false)
			r := runWith(t, "", map[string]string{ConfigEnv: cfg}, "", "list")
			if r.code != ExitOK {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			if got := pluginRuns(t, counter); got != 1 {
				t.Errorf("plugin ran %d times for one run, want 1", got)
			}
			seen := h.seenAuth()
			if len(seen) != 3 {
				t.Fatalf("%d calls, want 3 pages", len(seen))
			}
			for _, s := range seen {
				if s != "Bearer plugin-token-1" {
					t.Errorf("hub saw %q", s)
				}
			}
		})
	}
}

// An expired token is renewed before the next call.
func TestExecPluginExpiredReruns(t *testing.T) {
	h, addr := pluginHub(t, "plugin-token-1", "plugin-token-2", "plugin-token-3")
	cfg, counter := pluginConfig(t, addr, "ok", expiryAt(-time.Minute), false)
	r := runWith(t, "", map[string]string{ConfigEnv: cfg}, "", "list")
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if got := pluginRuns(t, counter); got != 3 {
		t.Errorf("plugin ran %d times for three calls with an expired token, want 3", got)
	}
	if got := strings.Join(h.seenAuth(), ","); got != "Bearer plugin-token-1,Bearer plugin-token-2,Bearer plugin-token-3" {
		t.Errorf("hub saw %s", got)
	}
}

// On Unauthenticated the plugin runs once more and the call is retried
// once; a second refusal is reported.
func TestExecPluginRefreshOnUnauthenticated(t *testing.T) {
	h, addr := pluginHub(t, "plugin-token-2")
	cfg, counter := pluginConfig(t, addr, "ok", "", false)
	r := runWith(t, "", map[string]string{ConfigEnv: cfg}, "", "whoami")
	if r.code != ExitOK || !strings.Contains(r.stdout, "sso-user") {
		t.Fatalf("exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	if got := pluginRuns(t, counter); got != 2 {
		t.Errorf("plugin ran %d times, want 2 (one refresh)", got)
	}
	if got := strings.Join(h.seenAuth(), ","); got != "Bearer plugin-token-1,Bearer plugin-token-2" {
		t.Errorf("hub saw %s", got)
	}

	h, addr = pluginHub(t) // accepts nothing
	cfg, counter = pluginConfig(t, addr, "ok", "", false)
	r = runWith(t, "", map[string]string{ConfigEnv: cfg}, "", "submit", "-f", "../../examples/workloads/gang.yaml")
	if r.code != ExitDenied || !strings.Contains(r.stderr, "the hub did not accept your credentials (token from exec plugin") {
		t.Errorf("exit %d: %s", r.code, r.stderr)
	}
	if got := pluginRuns(t, counter); got != 2 {
		t.Errorf("plugin ran %d times, want 2 (retried once only)", got)
	}
	if got := len(h.seenAuth()); got != 2 {
		t.Errorf("%d calls, want 2", got)
	}
	if h.submits != 0 {
		t.Errorf("refused submit stored %d workloads", h.submits)
	}
}

// A failing plugin is exit code 7 with its stderr, truncated; nothing is
// sent to the hub; a malformed answer is never echoed (it may hold a
// token).
func TestExecPluginFailure(t *testing.T) {
	for _, tc := range []struct {
		mode string
		want []string
	}{
		{"fail", []string{"exec credential plugin", "exited with code 3", "its stderr:\n  login required: run sso-login first", "[stderr truncated]"}},
		{"badjson", []string{"did not print an ExecCredential as JSON on stdout"}},
		{"wrongkind", []string{`printed kind "Token"; want ExecCredential`}},
		{"stdin", []string{"exited with code 1", "nothing typed"}}, // not interactive: no stdin
	} {
		t.Run(tc.mode, func(t *testing.T) {
			h, addr := pluginHub(t, "plugin-token-1")
			cfg, _ := pluginConfig(t, addr, tc.mode, "", false)
			r := runWith(t, "", map[string]string{ConfigEnv: cfg}, "typed-token\n", "list")
			if r.code != ExitDenied {
				t.Errorf("exit %d, want %d: %s", r.code, ExitDenied, r.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
			if len(r.stderr) > execStderrLimit+1000 {
				t.Errorf("stderr is %d bytes; the plugin's should be truncated", len(r.stderr))
			}
			if strings.Contains(r.stderr, "plugin-secret") {
				t.Errorf("stderr echoes the plugin's stdout: %s", r.stderr)
			}
			if n := len(h.seenAuth()); n != 0 {
				t.Errorf("%d calls reached the hub", n)
			}
		})
	}
}

// An interactive plugin reads meridianctl's stdin.
func TestExecPluginInteractive(t *testing.T) {
	h, addr := pluginHub(t, "typed-token")
	cfg, _ := pluginConfig(t, addr, "stdin", "", true)
	r := runWith(t, "", map[string]string{ConfigEnv: cfg}, "typed-token\n", "whoami")
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if got := strings.Join(h.seenAuth(), ","); got != "Bearer typed-token" {
		t.Errorf("hub saw %s", got)
	}
}
