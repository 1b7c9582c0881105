package cli

import (
	"strings"
	"testing"
)

// No command prints a bearer token: not in results, errors or -v output,
// whatever the command and however it ends. An API token's secret is
// printed by token create only.
func TestTokenNeverPrinted(t *testing.T) {
	hub, addr := securedHub(t)
	dir := t.TempDir()
	tokFile := writeFile(t, dir, "alice.token", aliceToken+"\n", 0o600)
	cfg := writeFile(t, dir, "config.yaml", "apiVersion: meridian.io/v1\nkind: Config\ncurrentContext: a\ncontexts:\n  - name: a\n    hub: "+addr+
		"\n    token: "+aliceToken+"\n  - name: far\n    hub: hub.example.com:7070\n    token: "+aliceToken+"\n", 0o600)
	created := runWith(t, addr, map[string]string{TokenEnv: aliceToken}, "", "token", "create", "--description", "ci")
	apiSecret := strings.TrimSpace(created.stdout)
	if created.code != ExitOK || !strings.HasPrefix(apiSecret, "mrd_") {
		t.Fatalf("token create: %d %q %s", created.code, created.stdout, created.stderr)
	}
	commands := [][]string{
		{"whoami"}, {"list"}, {"get", "wl-04"}, {"get", "wl-nope"}, {"queues"}, {"queue", "get", "acme/vision", "-o", "yaml"},
		{"clusters"}, {"explain", "wl-03"}, {"watch"}, {"version"}, {"token", "list"}, {"token", "list", "-o", "json"},
		{"token", "revoke", "tk0001"}, {"audit"}, {"audit", "-o", "yaml"}, {"queue", "delete", "acme/search/inference"},
		{"cluster", "drain", "east-h100"}, {"submit", "-f", "../../examples/workloads/gang.yaml"},
		{"config", "view"}, {"config", "view", "-o", "json"}, {"config", "get-contexts"}, {"--help"},
		{"--context", "far", "list"}, {"--hub", "10.9.9.9:7070", "list"}, {"--timeout", "0s", "list"},
	}
	ways := map[string]struct {
		env  map[string]string
		args []string
	}{
		"env":        {map[string]string{TokenEnv: aliceToken, ConfigEnv: cfg}, nil},
		"flag":       {map[string]string{ConfigEnv: cfg}, []string{"--token", aliceToken}},
		"token file": {map[string]string{ConfigEnv: cfg}, []string{"--token-file", tokFile}},
		"context":    {map[string]string{ConfigEnv: cfg, HubEnv: ""}, nil},
	}
	for name, w := range ways {
		for _, c := range commands {
			for _, verbose := range []bool{false, true} {
				args := append(append([]string(nil), w.args...), c...)
				if verbose {
					args = append([]string{"-v"}, args...)
				}
				r := runWith(t, addr, w.env, "", args...)
				out := r.stdout + r.stderr
				if strings.Contains(out, aliceToken) || strings.Contains(out, "AliceSecret") {
					t.Errorf("%s: meridianctl %s prints the bearer token:\n%s", name, strings.Join(c, " "), out)
				}
				if strings.Contains(out, apiSecret) {
					t.Errorf("%s: meridianctl %s prints the API token secret:\n%s", name, strings.Join(c, " "), out)
				}
			}
		}
	}
	// A token the hub refuses is not echoed either.
	for _, args := range [][]string{{"--token", "mrd_zz_RefusedSecret", "whoami"}, {"-v", "--token", "mrd_zz_RefusedSecret", "list"}} {
		r := runWith(t, addr, nil, "", args...)
		if r.code != ExitDenied || strings.Contains(r.stdout+r.stderr, "RefusedSecret") {
			t.Errorf("%v: exit %d: %s%s", args, r.code, r.stdout, r.stderr)
		}
	}
	if len(hub.seenAuth()) == 0 {
		t.Fatal("no call reached the hub")
	}
}
