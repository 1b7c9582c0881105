package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// runWith runs one command line with the environment env (MERIDIAN_HUB
// set to addr unless env names it), the clock at t0+1h, and replaces
// addr by HUB and each of hide by its key in the output.
func runWith(t *testing.T, addr string, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code := Main(ctx, args, Env{
		Stdin:  strings.NewReader(stdin),
		Stdout: &out,
		Stderr: &errb,
		Getenv: func(k string) string {
			if v, ok := env[k]; ok {
				return v
			}
			if k == HubEnv {
				return addr
			}
			return ""
		},
		Now: func() time.Time { return t0.Add(time.Hour) },
	})
	clean := func(s string) string {
		if addr != "" {
			s = strings.ReplaceAll(s, addr, "HUB")
		}
		return strings.ReplaceAll(s, runtime.Version(), "GOVERSION")
	}
	return result{code: code, stdout: clean(out.String()), stderr: clean(errb.String())}
}

// aliceToken is the bearer token the secured fake hub takes for alice.
const aliceToken = "mrd_alice1_AliceSecretAliceSecret"

// securedHub is the seeded fake hub with identity data, accepting
// aliceToken only.
func securedHub(t *testing.T) (*fakeHub, string) {
	t.Helper()
	h := newFakeHub()
	h.seed()
	h.seedAuth()
	h.auth.tokens = map[string]*meridianv1.Principal{
		aliceToken: {User: "alice", Groups: []string{"ml-research", "acme-ci"}, Method: "oidc"},
	}
	h.auth.deny = map[string]string{
		"/meridian.v1.QueueService/DeleteQueue":    "you may not delete queue acme/search/inference: it needs manage on the queue or an ancestor",
		"/meridian.v1.ClusterService/DrainCluster": "this needs the clusters.manage permission",
	}
	return h, h.serve(t)
}

// TestSecurityCommands runs the identity commands (whoami, token, audit),
// the access lists and submit policies of queues, and refused calls
// against the fake hub, comparing the output with golden files.
func TestSecurityCommands(t *testing.T) {
	hub, addr := securedHub(t)
	env := map[string]string{TokenEnv: aliceToken}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		code int
	}{
		{name: "whoami", args: []string{"whoami"}},
		{name: "whoami_json", args: []string{"whoami", "-o", "json"}},
		{name: "whoami_no_token", args: []string{"whoami"}, env: map[string]string{}, code: ExitDenied},
		{name: "whoami_bad_token", args: []string{"whoami", "--token", "mrd_x_wrong"}, code: ExitDenied},
		{name: "token_create", args: []string{"token", "create", "--description", "CI for acme", "--group", "acme-ci", "--permission", "queues.create", "--ttl", "720h"}},
		{name: "token_create_json", args: []string{"token", "create", "--description", "terraform", "--user", "terraform", "-o", "json"}},
		{name: "token_create_no_description", args: []string{"token", "create"}, code: ExitUsage},
		{name: "token_create_bad_ttl", args: []string{"token", "create", "--description", "x", "--ttl", "10m"}, code: ExitUsage},
		{name: "token_list", args: []string{"token", "list"}},
		{name: "token_list_yaml", args: []string{"token", "list", "-o", "yaml"}},
		{name: "token_revoke", args: []string{"token", "revoke", "tk0001"}},
		{name: "token_revoke_not_found", args: []string{"token", "revoke", "tk9999"}, code: ExitNotFound},
		{name: "token_no_subcommand", args: []string{"token"}, code: ExitUsage},
		{name: "audit", args: []string{"audit"}},
		{name: "audit_filters", args: []string{"audit", "--user", "alice", "--result", "allowed"}},
		{name: "audit_since", args: []string{"audit", "--since", "35m", "--until", "2026-11-30T12:45:00Z"}},
		{name: "audit_target_verb", args: []string{"audit", "--target", "acme", "--verb", "workloads.submit"}},
		{name: "audit_limit", args: []string{"audit", "--limit", "3"}},
		{name: "audit_json", args: []string{"audit", "--result", "denied", "-o", "json"}},
		{name: "audit_none", args: []string{"audit", "--user", "nobody"}},
		{name: "audit_bad_result", args: []string{"audit", "--result", "ok"}, code: ExitUsage},
		{name: "audit_bad_since", args: []string{"audit", "--since", "yesterday"}, code: ExitUsage},
		{name: "queues_access", args: []string{"queues", "--prefix", "acme/vision"}},
		{name: "queue_get_access", args: []string{"queue", "get", "acme/vision"}},
		{name: "queue_get_access_yaml", args: []string{"queue", "get", "acme/vision", "-o", "yaml"}},
		{name: "queue_apply_access_dry_run", args: []string{"queue", "apply", "--dry-run", "-f", "testdata/input/queue-access.yaml"}},
		{name: "queue_apply_access_prune_dry_run", args: []string{"queue", "apply", "--dry-run", "--prune", "-f", "testdata/input/queue-access.yaml"}},
		{name: "queue_apply_access", args: []string{"queue", "apply", "-f", "testdata/input/queue-access.yaml"}},
		{name: "queue_apply_access_again", args: []string{"queue", "apply", "-f", "testdata/input/queue-access.yaml"}},
		{name: "denied_with_reason", args: []string{"queue", "delete", "acme/search/inference"}, code: ExitDenied},
		{name: "denied_plain_reason", args: []string{"cluster", "drain", "east-h100"}, code: ExitDenied},
		{name: "help_token_create", args: []string{"token", "create", "--help"}},
		{name: "help_audit", args: []string{"audit", "--help"}},
		{name: "help_config_set_context", args: []string{"config", "set-context", "--help"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := env
			if tc.env != nil {
				e = tc.env
			}
			r := runWith(t, addr, e, "", tc.args...)
			if r.code != tc.code {
				t.Errorf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, tc.code, r.stdout, r.stderr)
			}
			if tc.code != ExitOK && !strings.HasPrefix(r.stderr, "error: ") {
				t.Errorf("a failing command must print an error: line; stderr = %q", r.stderr)
			}
			golden(t, tc.args, r)
		})
	}
	// The apply sent the access list and policy under their own mask paths.
	var masks []string
	for _, u := range hub.updates {
		masks = append(masks, strings.Join(u.GetUpdateMask().GetPaths(), ","))
	}
	if got := strings.Join(masks, " "); got != "access,submit_policy" {
		t.Errorf("update masks %q, want one update of access,submit_policy", got)
	}
	q := hub.queues["acme/vision"]
	if got := accessText(q.GetAccess()); got != "group:ml-research=submit,view; token:tk0001=submit; user:bob=cancel,view" {
		t.Errorf("stored access %q", got)
	}
}

// TestAuditPaging follows page tokens and never asks for more than
// --limit.
func TestAuditPaging(t *testing.T) {
	hub, addr := securedHub(t)
	env := map[string]string{TokenEnv: aliceToken}
	r := runWith(t, addr, env, "", "audit", "--limit", "3")
	if r.code != ExitOK || strings.Count(r.stdout, "\n") != 4 {
		t.Fatalf("exit %d, want 3 rows:\n%s%s", r.code, r.stdout, r.stderr)
	}
	reqs := hub.auth.auditReqs
	if len(reqs) != 2 || reqs[0].GetPageSize() != 3 || reqs[1].GetPageSize() != 1 || reqs[1].GetPageToken() != "off-2" {
		t.Fatalf("requests %v, want page sizes 3 then 1 with token off-2", reqs)
	}
	hub.auth.auditReqs = nil
	r = runWith(t, addr, env, "", "audit", "--limit", "0", "--since", "2026-11-30T12:00:00Z")
	if r.code != ExitOK || strings.Count(r.stdout, "\n") != 6 || len(hub.auth.auditReqs) != 3 {
		t.Fatalf("all events: exit %d, %d requests:\n%s%s", r.code, len(hub.auth.auditReqs), r.stdout, r.stderr)
	}
	if got := hub.auth.auditReqs[0].GetSince().AsTime(); !got.Equal(t0) {
		t.Errorf("since %s, want %s", got, t0)
	}
}

// TestTokenCreateSecretOnStdoutOnly: the secret is stdout's only line, so
// it can be redirected to a file, and the warning is on stderr.
func TestTokenCreateSecretOnStdoutOnly(t *testing.T) {
	hub, addr := securedHub(t)
	r := runWith(t, addr, map[string]string{TokenEnv: aliceToken}, "", "token", "create", "--description", "ci")
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if !strings.HasPrefix(r.stdout, "mrd_tk0003_") || strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("stdout %q, want the secret alone", r.stdout)
	}
	if !strings.Contains(r.stderr, "will not be shown again") && !strings.Contains(r.stderr, "cannot be shown again") {
		t.Errorf("no warning on stderr: %q", r.stderr)
	}
	if strings.Contains(r.stderr, "mrd_") {
		t.Errorf("secret on stderr: %q", r.stderr)
	}
	if req := hub.auth.createReq[0]; req.GetTtl() != nil {
		t.Errorf("ttl %v sent without --ttl; the hub's default applies", req.GetTtl())
	}
}

// TestQueueApplyAccessPrune removes access entries the file does not list
// only with --prune.
func TestQueueApplyAccessPrune(t *testing.T) {
	hub, addr := securedHub(t)
	env := map[string]string{TokenEnv: aliceToken}
	r := runWith(t, addr, env, "", "queue", "apply", "--prune", "-f", "testdata/input/queue-access.yaml")
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if got := accessText(hub.queues["acme/vision"].GetAccess()); got != "group:ml-research=submit,view; user:bob=cancel,view" {
		t.Errorf("access after --prune %q", got)
	}
	if !strings.Contains(r.stdout, "- access token:tk0001=submit") {
		t.Errorf("no removal line:\n%s", r.stdout)
	}
}

// writeFile writes a file under dir and returns its path.
func writeFile(t *testing.T, dir, name, text string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	return p
}
