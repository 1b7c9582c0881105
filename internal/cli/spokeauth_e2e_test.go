package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/hub/server"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// TestEndToEndWithClusterCredential is the production path on the
// embedded NATS: the hub issues NATS identities (SpokeAuth), `clusters
// register` writes a cluster's .creds file, a real agent that uses it (and
// its own inbox, as meridian-agent does) runs a workload, and `clusters
// revoke` cuts it off while the hub keeps serving.
func TestEndToEndWithClusterCredential(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole hub and an agent; skipped with -short")
	}
	addr, natsURL := startHubNATS(t, func(c *server.Config) { c.SpokeAuth = &server.SpokeAuth{} })

	// Without a credential the embedded NATS refuses the agent.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if b, err := natsbus.Connect(ctx, natsURL); err == nil {
		b.Close()
		t.Fatal("the hub's NATS accepted a connection without credentials")
	}

	creds := filepath.Join(t.TempDir(), "ams.creds")
	r := mustRun(t, addr, "", "clusters", "register", "ams-a100", "--creds-file", creds)
	if r.stdout != "" || !strings.Contains(r.stderr, "cluster ams-a100 registered (NATS user U") {
		t.Fatalf("register printed stdout %q stderr %q", r.stdout, r.stderr)
	}
	if st, err := os.Stat(creds); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("creds file: %v, %v; want mode 0600", st, err)
	}
	r = runCLI(t, addr, "", "clusters", "register", "ams-a100")
	if r.code == ExitOK || !strings.Contains(r.stderr, "already registered") {
		t.Fatalf("second register: exit %d %s", r.code, r.stderr)
	}
	r = runCLI(t, addr, "", "clusters", "register", "ams-a100", "--creds-file", creds)
	if r.code != ExitUsage || !strings.Contains(r.stderr, "--creds-file") {
		t.Fatalf("register over an existing file: exit %d %s", r.code, r.stderr)
	}

	inbox, _ := natsbus.ClusterInboxPrefix("ams-a100")
	bus := startAgentWith(t, natsURL, "ams-a100", "a100-fractional", 300*time.Millisecond,
		natsbus.WithCredsFile(creds), natsbus.WithInboxPrefix(inbox), natsbus.WithReconnectWait(50*time.Millisecond))

	mustRun(t, addr, "", "queue", "apply", "-f", "../../examples/queues/acme.yaml")
	job := "name: short\nqueue: acme/research\npod_sets:\n- name: worker\n  replicas: 2\n  resources:\n    gpu_milli: 1000\n    accelerator_class: nvidia-a100-40gb\n"
	r = mustRun(t, addr, job, "submit", "-f", "-")
	waitPhase(t, addr, strings.Fields(r.stdout)[1], "WORKLOAD_PHASE_SUCCEEDED")

	r = mustRun(t, addr, "", "clusters", "credentials", "ams-a100")
	if !strings.Contains(r.stdout, " active") {
		t.Fatalf("credentials =\n%s", r.stdout)
	}
	key := strings.Fields(strings.Split(r.stdout, "\n")[1])[0]
	r = runCLI(t, addr, "", "clusters", "revoke", "ams-a100")
	if r.code != ExitUsage {
		t.Fatalf("revoke without --key or --all: exit %d %s", r.code, r.stderr)
	}
	r = mustRun(t, addr, "", "clusters", "revoke", "ams-a100", "--key", key)
	if !strings.Contains(r.stdout, "revoked "+key) {
		t.Fatalf("revoke printed %q", r.stdout)
	}
	deadline := time.Now().Add(10 * time.Second)
	for bus.Conn().IsConnected() {
		if time.Now().After(deadline) {
			t.Fatal("the agent is still connected 10s after its credential was revoked")
		}
		time.Sleep(20 * time.Millisecond)
	}
	r = mustRun(t, addr, "", "clusters", "credentials", "ams-a100")
	if !strings.Contains(r.stdout, "revoked ") {
		t.Fatalf("credentials after revoke =\n%s", r.stdout)
	}
	mustRun(t, addr, "", "version") // the hub serves on
}
