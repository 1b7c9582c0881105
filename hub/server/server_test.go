package server

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// startHub runs a hub on dir until the returned stop is called; stop
// returns Run's result.
func startHub(t *testing.T, dir string) (*Server, func() error) {
	t.Helper()
	s, stop := runHub(t, Config{DataDir: dir, HubID: "hub-a", UnsafeNoFsync: true, LeaderTTL: time.Second, Logger: testLogger()})
	waitReady(t, s)
	return s, stop
}

// runHub builds a hub from cfg and runs it until the returned stop is
// called or the test ends: stop cancels Run, waits up to 15 s for it,
// closes the hub and returns Run's result. It does not wait for the hub
// to be ready (the caller knows whether it speaks TLS).
func runHub(t *testing.T, cfg Config) (*Server, func() error) {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stopped := false
	var runErr error
	stop := func() error {
		if stopped {
			return runErr
		}
		stopped = true
		cancel()
		select {
		case runErr = <-done:
		case <-time.After(15 * time.Second):
			t.Fatal("Run did not return within 15s of cancel")
		}
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return s, stop
}

func waitReady(t *testing.T, s *Server) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, body := get(t, "http://"+s.Addrs().HTTP+"/readyz")
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 15s: %d %s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestHubServesRESTAndGRPCAndSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s, stop := startHub(t, dir)
	base := "http://" + s.Addrs().HTTP
	if !strings.HasPrefix(s.Addrs().GRPC, "127.0.0.1:") || !strings.HasPrefix(s.Addrs().HTTP, "127.0.0.1:") || !strings.HasPrefix(s.NATSURL(), "nats://127.0.0.1:") {
		t.Fatalf("not on loopback: %+v %s", s.Addrs(), s.NATSURL())
	}
	if code, body := get(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("healthz %d %q", code, body)
	}
	for _, q := range []string{"acme", "acme/vision"} {
		if code, body := post(t, base+"/v1/queues", `{"path":"`+q+`","weight":1,"quotas":[{"acceleratorClass":"nvidia-h100-80gb","nominalMilliGpus":8000}]}`); code != 200 {
			t.Fatalf("create queue %s: %d %s", q, code, body)
		}
	}
	code, body := post(t, base+"/v1/workloads", `{"queue":"acme/vision","podSets":[{"name":"w","replicas":1,"resources":{"gpuMilli":1000,"acceleratorClass":"nvidia-h100-80gb"}}]}`)
	if code != 200 {
		t.Fatalf("submit: %d %s", code, body)
	}
	var sub meridianv1.SubmitWorkloadResponse
	if err := protojson.Unmarshal([]byte(body), &sub); err != nil {
		t.Fatal(err)
	}
	id := sub.GetWorkload().GetId()
	// Oversized REST body: 413 with a status naming the body.
	big := `{"name":"` + strings.Repeat("x", 3<<20) + `"}`
	if code, body := post(t, base+"/v1/workloads", big); code != http.StatusRequestEntityTooLarge || !strings.Contains(body, `"field":"body"`) {
		t.Fatalf("oversized: %d %.200s", code, body)
	}

	conn, err := grpc.NewClient(s.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	w, err := meridianv1.NewWorkloadServiceClient(conn).GetWorkload(ctx, &meridianv1.GetWorkloadRequest{Id: id})
	if err != nil || w.GetQueue() != "acme/vision" {
		t.Fatalf("gRPC get: %v %v", w, err)
	}
	// The loop campaigns: this replica becomes leader, and health says so.
	admin := meridianv1.NewAdminServiceClient(conn)
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := admin.GetLeader(ctx, &meridianv1.GetLeaderRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if l.GetIsSelf() && l.GetHubId() == "hub-a" && l.GetTerm() > 0 && l.GetAddress() == s.Addrs().GRPC {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not leader after 10s: %v", l)
		}
		time.Sleep(50 * time.Millisecond)
	}
	h, err := admin.GetHealth(ctx, &meridianv1.GetHealthRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range h.GetComponents() {
		names = append(names, c.GetName())
		if c.GetStatus() != meridianv1.HealthStatus_HEALTH_STATUS_SERVING {
			t.Errorf("component %s: %v %s", c.GetName(), c.GetStatus(), c.GetMessage())
		}
	}
	if got := strings.Join(names, ","); got != "cache,etcd,leader,nats,scheduler" || h.GetHubId() != "hub-a" {
		t.Fatalf("health components %s hub %s", got, h.GetHubId())
	}
	// Metrics carry the API counters and the loop's.
	code, metrics := get(t, base+"/metrics")
	if code != 200 || !strings.Contains(metrics, `meridian_api_requests_total{code="OK",method="/meridian.v1.WorkloadService/SubmitWorkload"} 1`) {
		t.Fatalf("metrics %d lack the submit counter:\n%.2000s", code, metrics)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run returned %v after cancel", err)
	}

	// Same data dir: the acknowledged workload is still there.
	s2, _ := startHub(t, dir)
	code, body = get(t, "http://"+s2.Addrs().HTTP+"/v1/workloads/"+id)
	if code != 200 || !strings.Contains(body, id) {
		t.Fatalf("after restart: %d %s", code, body)
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no data dir", Config{}, "DataDir is required"},
		{"empty etcd endpoint", Config{DataDir: "x", EtcdEndpoints: []string{""}}, "EtcdEndpoints[0] is empty"},
		{"negative period", Config{DataDir: "x", SchedulePeriod: -time.Second}, "SchedulePeriod"},
		{"negative ttl", Config{DataDir: "x", LeaderTTL: -1}, "LeaderTTL"},
		{"bad grpc addr", Config{DataDir: "x", GRPCAddr: "nope"}, "GRPCAddr"},
		{"negative size", Config{DataDir: "x", MaxRequestBytes: -1}, "MaxRequestBytes"},
		{"negative txn ops", Config{DataDir: "x", EtcdMaxTxnOps: -2}, "EtcdMaxTxnOps"},
		{"negative ttl", Config{DataDir: "x", RetentionTTL: -time.Hour}, "Config.RetentionTTL"},
		{"negative cap", Config{DataDir: "x", RetentionPerQueue: -1}, "Config.RetentionPerQueue"},
		{"ttl under the idempotency window", Config{DataDir: "x", RetentionTTL: time.Hour}, "Config.RetentionTTL 1h0m0s is shorter than 24h"},
		{"negative interval", Config{DataDir: "x", RetentionInterval: -time.Second}, "Config.RetentionInterval"},
		{"window under a minute", Config{DataDir: "x", IdempotencyWindow: 30 * time.Second}, "Config.IdempotencyWindow 30s is shorter than 1m0s"},
		{"negative window", Config{DataDir: "x", IdempotencyWindow: -time.Hour}, "Config.IdempotencyWindow"},
		{"ttl under a short window", Config{DataDir: "x", IdempotencyWindow: time.Hour, RetentionTTL: 30 * time.Minute}, "Config.RetentionTTL 30m0s is shorter than 1h0m0s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := New(c.cfg)
			if err == nil {
				_ = s.Close()
				t.Fatal("New accepted a bad config")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not mention %q", err, c.want)
			}
		})
	}
}

// testLogger writes the hub's logs to stderr under -v and drops them
// otherwise.
func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}
