package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	embednats "github.com/meridian-gpu/meridian/internal/embedded/nats"
	"github.com/meridian-gpu/meridian/internal/testetcd"
	"github.com/meridian-gpu/meridian/internal/testpki"
)

// hubProcess is one meridian-hub command running in the test.
type hubProcess struct {
	info   addrInfo
	stop   context.CancelFunc
	done   chan struct{} // closed when run returned, with err
	err    error
	stdout *syncBuf
}

// startHubCommand runs meridian-hub with args (plus loopback listeners
// and an address file) until the test ends, and waits until /readyz
// answers 200.
// testHubArgs are the flags every test hub here starts with: loopback
// ports, fast leadership, its address written to addrFile, and a data dir
// of its own (the cache snapshot goes there), not ./meridian-data in the
// package's folder.
func testHubArgs(t *testing.T, id, addrFile string) []string {
	return []string{"--hub-id", id, "--data-dir", filepath.Join(t.TempDir(), "data"), "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--auth", "none",
		"--leader-ttl", "1s", "--schedule-period", "100ms", "--addr-file", addrFile, "--log-level", "error"}
}

func startHubCommand(t *testing.T, id string, args ...string) *hubProcess {
	t.Helper()
	addrFile := filepath.Join(t.TempDir(), "addrs.json")
	ctx, cancel := context.WithCancel(context.Background())
	h := &hubProcess{stop: cancel, done: make(chan struct{}), stdout: &syncBuf{}}
	args = append(testHubArgs(t, id, addrFile), args...)
	go func() { h.err = run(ctx, args, h.stdout, io.Discard); close(h.done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-h.done:
		case <-time.After(15 * time.Second):
			t.Errorf("%s did not stop within 15s", id)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, err := os.ReadFile(addrFile); err == nil && json.Unmarshal(b, &h.info) == nil && h.info.HTTP != "" {
			if resp, err := http.Get("http://" + h.info.HTTP + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return h
				}
			}
		}
		select {
		case <-h.done:
			t.Fatalf("%s returned early: %v\n%s", id, h.err, h.stdout.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after 20s\n%s", id, h.stdout.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// leader asks the hub at h who leads (GET /v1/admin/leader).
func (h *hubProcess) leader(t *testing.T) (id string, self bool) {
	t.Helper()
	resp, err := http.Get("http://" + h.info.HTTP + "/v1/admin/leader")
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	var l struct {
		HubID  string `json:"hubId"`
		IsSelf bool   `json:"isSelf"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&l) != nil {
		return "", false
	}
	return l.HubID, l.IsSelf
}

func waitUntil(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEtcdTLSTwoHubCommandsShareOneEtcd runs meridian-hub twice, as two
// replicas on one machine would run, with the documented flags against
// an etcd that requires client certificates and a user whose role holds
// /meridian/ only: both serve, one leads, and when it stops the other
// takes over.
func TestEtcdTLSTwoHubCommandsShareOneEtcd(t *testing.T) {
	clearNATSEnv(t)
	clearEtcdEnv(t)
	t.Setenv("MERIDIAN_AUTH", "")
	p := testpki.New(t)
	x := testetcd.Start(t, testetcd.Options{PKI: p})
	x.EnableAuth(t, "root-secret", "meridian", "meridian-secret")
	pw := writeTemp(t, "etcd-password", "meridian-secret\n")
	ns, err := embednats.Start(embednats.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Close() })
	flags := []string{"--etcd-endpoints", x.Endpoint, "--etcd-ca-file", p.CAFile,
		"--etcd-cert-file", p.ClientCertFile, "--etcd-key-file", p.ClientKeyFile,
		"--etcd-username", "meridian", "--etcd-password-file", pw, "--nats-url", ns.ClientURL()}
	a := startHubCommand(t, "hub-a", flags...)
	b := startHubCommand(t, "hub-b", flags...)
	var leader, follower *hubProcess
	waitUntil(t, 15*time.Second, "a leader", func() bool {
		ida, selfA := a.leader(t)
		idb, selfB := b.leader(t)
		if ida == "" || ida != idb || selfA == selfB {
			return false
		}
		leader, follower = a, b
		if selfB {
			leader, follower = b, a
		}
		return true
	})
	if emb := follower.info.Etcd; len(emb) != 1 || emb[0] != x.Endpoint {
		t.Fatalf("follower uses etcd %v, want %s", emb, x.Endpoint)
	}
	if want := "etcd      " + x.Endpoint + " (external, TLS with a client certificate, user meridian)"; !strings.Contains(a.stdout.String(), want) {
		t.Fatalf("banner lacks %q:\n%s", want, a.stdout.String())
	}
	leader.stop()
	select {
	case <-leader.done:
		if leader.err != nil {
			t.Fatalf("the leader stopped with %v", leader.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the leader did not stop within 15s")
	}
	waitUntil(t, 15*time.Second, follower.info.HubID+" taking over", func() bool {
		_, self := follower.leader(t)
		return self
	})
}

// envHubArgs carries a helper process's meridian-hub arguments (JSON).
const envHubArgs = "MERIDIAN_TEST_HUB_ARGS"

// TestEtcdTLSHubHelperProcess is not a test: run as a child by
// startHubProcess, it is meridian-hub, so that the test can kill it.
func TestEtcdTLSHubHelperProcess(t *testing.T) {
	raw := os.Getenv(envHubArgs)
	if raw == "" {
		t.Skip("a helper process for TestEtcdTLSLeaderKilled")
	}
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, args, os.Stdout, os.Stderr); err != nil {
		t.Fatal(err)
	}
}

// startHubProcess runs meridian-hub with args in a child process (the
// test binary) and waits until it is ready; the process is killed when
// the test ends.
func startHubProcess(t *testing.T, id string, args ...string) (*hubProcess, *exec.Cmd) {
	t.Helper()
	addrFile := filepath.Join(t.TempDir(), "addrs.json")
	args = append(testHubArgs(t, id, addrFile), args...)
	raw, _ := json.Marshal(args)
	h := &hubProcess{done: make(chan struct{}), stdout: &syncBuf{}}
	cmd := exec.Command(os.Args[0], "-test.run=^TestEtcdTLSHubHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envHubArgs+"="+string(raw))
	cmd.Stdout, cmd.Stderr = h.stdout, h.stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { h.err = cmd.Wait(); close(h.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-h.done
	})
	h.stop = func() { _ = cmd.Process.Signal(syscall.SIGTERM) }
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(addrFile); err == nil && json.Unmarshal(b, &h.info) == nil && h.info.HTTP != "" {
			if resp, err := http.Get("http://" + h.info.HTTP + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return h, cmd
				}
			}
		}
		select {
		case <-h.done:
			t.Fatalf("%s exited early: %v\n%s", id, h.err, h.stdout.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after 30s\n%s", id, h.stdout.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEtcdTLSLeaderKilled: two meridian-hub processes on one TLS etcd
// with a user; the leader is killed (SIGKILL: no resignation, its lease
// simply expires) and the other takes over within about --leader-ttl.
func TestEtcdTLSLeaderKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two hub processes")
	}
	clearNATSEnv(t)
	clearEtcdEnv(t)
	t.Setenv("MERIDIAN_AUTH", "")
	p := testpki.New(t)
	x := testetcd.Start(t, testetcd.Options{PKI: p})
	x.EnableAuth(t, "root-secret", "meridian", "meridian-secret")
	ns, err := embednats.Start(embednats.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Close() })
	t.Setenv("MERIDIAN_ETCD_PASSWORD", "meridian-secret") // the password from the environment this time
	flags := []string{"--etcd-endpoints", x.Endpoint, "--etcd-ca-file", p.CAFile,
		"--etcd-cert-file", p.ClientCertFile, "--etcd-key-file", p.ClientKeyFile,
		"--etcd-username", "meridian", "--nats-url", ns.ClientURL()}
	a, ca := startHubProcess(t, "hub-a", flags...)
	b, cb := startHubProcess(t, "hub-b", flags...)
	var follower *hubProcess
	var leaderCmd *exec.Cmd
	waitUntil(t, 15*time.Second, "a leader", func() bool {
		ida, selfA := a.leader(t)
		idb, selfB := b.leader(t)
		if ida == "" || ida != idb || selfA == selfB {
			return false
		}
		follower, leaderCmd = b, ca
		if selfB {
			follower, leaderCmd = a, cb
		}
		return true
	})
	if err := leaderCmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 15*time.Second, follower.info.HubID+" taking over from a killed leader", func() bool {
		_, self := follower.leader(t)
		return self
	})
}
