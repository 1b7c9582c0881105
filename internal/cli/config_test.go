package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// twoHubs starts two fake hubs, each accepting one token, and writes a
// configuration with a context for each (a: token in the file, current;
// b: token file).
func twoHubs(t *testing.T) (a, b *fakeHub, addrA, addrB, cfgPath string) {
	t.Helper()
	a, b = newFakeHub(), newFakeHub()
	a.seed()
	b.seed()
	a.auth.tokens = map[string]*meridianv1.Principal{"tok-a": {User: "ann", Method: "token"}, "tok-env": {User: "env", Method: "token"}, "tok-flag": {User: "flag", Method: "token"}}
	b.auth.tokens = map[string]*meridianv1.Principal{"tok-b": {User: "ben", Method: "token"}, "tok-flag": {User: "flag", Method: "token"}}
	addrA, addrB = a.serve(t), b.serve(t)
	dir := t.TempDir()
	writeFile(t, dir, "b.token", "tok-b\n", 0o600)
	cfgPath = writeFile(t, dir, "config.yaml", `apiVersion: meridian.io/v1
kind: Config
currentContext: a
contexts:
  - name: a
    hub: `+addrA+`
    token: tok-a
  - name: b
    hub: `+addrB+`
    tokenFile: b.token
`, 0o600)
	return a, b, addrA, addrB, cfgPath
}

func lastAuth(h *fakeHub) string {
	s := h.seenAuth()
	if len(s) == 0 {
		return "<none>"
	}
	return s[len(s)-1]
}

// Flags win over the environment, which wins over the context.
func TestConfigPrecedence(t *testing.T) {
	a, b, addrA, addrB, cfg := twoHubs(t)
	base := map[string]string{ConfigEnv: cfg, HubEnv: ""}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name     string
		env      map[string]string
		args     []string
		hub      *fakeHub
		wantAuth string
		wantUser string
	}{
		{"current context", with(), nil, a, "Bearer tok-a", "ann"},
		{"--context", with(), []string{"--context", "b"}, b, "Bearer tok-b", "ben"},
		{"env context", with(ContextEnv, "b"), nil, b, "Bearer tok-b", "ben"},
		{"--context over env", with(ContextEnv, "b"), []string{"--context", "a"}, a, "Bearer tok-a", "ann"},
		{"env hub over context", with(HubEnv, addrB), []string{"--token", "tok-flag"}, b, "Bearer tok-flag", "flag"},
		{"--hub over env", with(HubEnv, addrB), []string{"--hub", addrA, "--token", "tok-flag"}, a, "Bearer tok-flag", "flag"},
		{"env token over context", with(TokenEnv, "tok-env"), nil, a, "Bearer tok-env", "env"},
		{"--token over env", with(TokenEnv, "tok-env"), []string{"--token", "tok-flag"}, a, "Bearer tok-flag", "flag"},
		{"--token-file over context", with(), []string{"--token-file", filepath.Join(filepath.Dir(cfg), "b.token"), "--context", "b"}, b, "Bearer tok-b", "ben"},
		{"--config", map[string]string{HubEnv: ""}, []string{"--config", cfg}, a, "Bearer tok-a", "ann"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runWith(t, "", tc.env, "", append(tc.args, "whoami", "-o", "json")...)
			if r.code != ExitOK {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			if got := lastAuth(tc.hub); got != tc.wantAuth {
				t.Errorf("hub saw %q, want %q", got, tc.wantAuth)
			}
			if !strings.Contains(r.stdout, `"user": "`+tc.wantUser+`"`) {
				t.Errorf("whoami:\n%s", r.stdout)
			}
		})
	}
	r := runWith(t, "", base, "", "--context", "nope", "whoami")
	if r.code != ExitUsage || !strings.Contains(r.stderr, `--context: no context named "nope" in `+cfg) {
		t.Errorf("unknown context: exit %d %q", r.code, r.stderr)
	}
}

// A malformed file is refused with the file, line and field path.
func TestConfigStrictDecode(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"unknown key", "apiVersion: meridian.io/v1\nkind: Config\ncontexts:\n  - name: a\n    hub: h:1\n    tokn: x\n",
			[]string{"config.yaml:6: contexts[0].tokn: unknown field \"tokn\"; did you mean \"token\"?"}},
		{"unknown exec key", "apiVersion: meridian.io/v1\nkind: Config\ncontexts:\n  - name: a\n    exec:\n      command: x\n      argz: [a]\n",
			[]string{"config.yaml:7: contexts[0].exec.argz: unknown field \"argz\"; did you mean \"args\"?"}},
		{"wrong type", "apiVersion: meridian.io/v1\nkind: Config\ncontexts:\n  - name: a\n    tls: maybe\n",
			[]string{"contexts[0].tls: want true or false"}},
		{"wrong kind", "apiVersion: meridian.io/v1\nkind: KubeConfig\n", []string{"kind: want \"Config\", got \"KubeConfig\""}},
		{"two credentials", "apiVersion: meridian.io/v1\nkind: Config\ncontexts:\n  - name: a\n    token: x\n    tokenFile: /t\n",
			[]string{"contexts[0]: sets token and tokenFile; choose one credential"}},
		{"missing current", "apiVersion: meridian.io/v1\nkind: Config\ncurrentContext: prod\ncontexts:\n  - name: a\n",
			[]string{"currentContext: no context is named \"prod\""}},
		{"duplicate and nameless", "apiVersion: meridian.io/v1\nkind: Config\ncontexts:\n  - name: a\n  - name: a\n  - hub: h:1\n",
			[]string{"contexts[1].name: duplicate context \"a\"", "contexts[2].name: required"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, dir, tc.name+"/config.yaml", tc.text, 0o600)
			for _, args := range [][]string{{"list"}, {"config", "view"}} {
				r := runWith(t, "", map[string]string{ConfigEnv: p}, "", args...)
				if r.code != ExitInvalid {
					t.Errorf("%v: exit %d, want %d: %s", args, r.code, ExitInvalid, r.stderr)
				}
				if !strings.Contains(r.stderr, p) {
					t.Errorf("%v: error does not name the file %s: %s", args, p, r.stderr)
				}
				for _, w := range tc.want {
					if !strings.Contains(r.stderr, w) {
						t.Errorf("%v: error lacks %q:\n%s", args, w, r.stderr)
					}
				}
			}
		})
	}
}

// set-context creates the file (and its directories) with mode 0600,
// use-context and delete-context edit it, get-contexts lists it.
func TestConfigSetContextWrites0600(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "nested", "meridian", "config.yaml")
	env := map[string]string{"XDG_CONFIG_HOME": filepath.Join(dir, "nested")}
	run := func(args ...string) result {
		t.Helper()
		r := runWith(t, "", env, "", args...)
		if r.code != ExitOK {
			t.Fatalf("%v: exit %d: %s", args, r.code, r.stderr)
		}
		return r
	}
	run("config", "set-context", "prod", "--hub", "hub.example.com:7070", "--ca", "/etc/meridian/ca.pem", "--token-file", "/home/u/.meridian/prod.token", "--use")
	run("config", "set-context", "sso", "--hub", "hub.example.com:7070", "--tls", "--exec-command", "meridian-login", "--exec-arg", "--issuer=https://sso.example.com", "--exec-env", "SSO_CLIENT_SECRET=hush", "--exec-interactive")
	run("config", "set-context", "lab", "--hub", "127.0.0.1:7070", "--token", "lab-token-value")
	st, err := os.Stat(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	if st, err := os.Stat(filepath.Dir(cfg)); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("directory: %v %v, want 0700", err, st.Mode().Perm())
	}
	data, _ := os.ReadFile(cfg)
	want := `apiVersion: meridian.io/v1
kind: Config
currentContext: prod
contexts:
    - name: prod
      hub: hub.example.com:7070
      ca: /etc/meridian/ca.pem
      tokenFile: /home/u/.meridian/prod.token
    - name: sso
      hub: hub.example.com:7070
      tls: true
      exec:
        command: meridian-login
        args:
            - --issuer=https://sso.example.com
        env:
            - name: SSO_CLIENT_SECRET
              value: hush
        interactive: true
    - name: lab
      hub: 127.0.0.1:7070
      token: lab-token-value
`
	if string(data) != want {
		t.Errorf("file:\n%s\nwant:\n%s", data, want)
	}
	r := run("config", "get-contexts")
	wantTable := `CURRENT  NAME  HUB                   TLS  CREDENTIAL
*        prod  hub.example.com:7070  yes  token file /home/u/.meridian/prod.token
         sso   hub.example.com:7070  yes  exec meridian-login
         lab   127.0.0.1:7070        no   token
`
	if r.stdout != wantTable {
		t.Errorf("get-contexts:\n%s\nwant:\n%s", r.stdout, wantTable)
	}
	// A changed field keeps the others; a new credential replaces the old.
	run("config", "set-context", "prod", "--token", "other")
	run("config", "use-context", "lab")
	run("config", "delete-context", "sso")
	data, _ = os.ReadFile(cfg)
	for _, w := range []string{"currentContext: lab", "ca: /etc/meridian/ca.pem", "token: other"} {
		if !strings.Contains(string(data), w) {
			t.Errorf("file lacks %q:\n%s", w, data)
		}
	}
	if strings.Contains(string(data), "sso") || strings.Contains(string(data), "tokenFile") {
		t.Errorf("file still has sso or the replaced tokenFile:\n%s", data)
	}
	if r := runWith(t, "", env, "", "config", "use-context", "sso"); r.code != ExitNotFound {
		t.Errorf("use-context of a deleted context: exit %d", r.code)
	}
	if r := runWith(t, "", env, "", "config", "set-context", "x", "--cert", "/c.pem"); r.code != ExitUsage || !strings.Contains(r.stderr, "contexts[2].cert: cert and key go together") {
		t.Errorf("cert without key: exit %d %q", r.code, r.stderr)
	}
	// Relative paths are stored absolute.
	wd, _ := os.Getwd()
	run("config", "set-context", "rel", "--ca", "testdata/ca.pem")
	data, _ = os.ReadFile(cfg)
	if !strings.Contains(string(data), "ca: "+filepath.Join(wd, "testdata", "ca.pem")) {
		t.Errorf("relative --ca not made absolute:\n%s", data)
	}
}

// config view never prints a token or a secret-looking plugin variable.
func TestConfigViewRedacts(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "config.yaml", `apiVersion: meridian.io/v1
kind: Config
currentContext: a
contexts:
  - name: a
    hub: 127.0.0.1:7070
    token: mrd_abc_TopSecretValue
  - name: b
    exec:
      command: login
      env:
        - name: API_KEY
          value: PluginSecretValue
        - name: REGION
          value: eu-west
`, 0o600)
	for _, o := range []string{"yaml", "json"} {
		r := runWith(t, "", map[string]string{ConfigEnv: p}, "", "config", "view", "-o", o)
		if r.code != ExitOK {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		if strings.Contains(r.stdout, "TopSecretValue") || strings.Contains(r.stdout, "PluginSecretValue") {
			t.Errorf("-o %s prints a secret:\n%s", o, r.stdout)
		}
		if strings.Count(r.stdout, "<redacted>") != 2 || !strings.Contains(r.stdout, "eu-west") {
			t.Errorf("-o %s: want two redactions and the plain variable:\n%s", o, r.stdout)
		}
	}
}
