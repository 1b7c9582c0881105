package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestFlagErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"stray argument", []string{"serve"}, nil, `unexpected argument "serve"`},
		{"zero period", []string{"--schedule-period", "0s"}, nil, "scheduling.period (--schedule-period): must be positive (got 0s)"},
		{"negative timeout", []string{"--cluster-timeout", "-1s"}, nil, "scheduling.clusterTimeout (--cluster-timeout): must be positive"},
		{"tiny request limit", []string{"--max-request-bytes", "10"}, nil, "api.maxRequestBytes (--max-request-bytes): must be at least 4096"},
		{"bad log format", []string{"--log-format", "xml"}, nil, `logging.format (--log-format): want text or json (got "xml")`},
		{"bad log level", []string{"--log-level", "loud"}, nil, `logging.level (--log-level): want debug, info, warn or error (got "loud")`},
		{"bad env duration", nil, map[string]string{"MERIDIAN_SCHEDULE_PERIOD": "soon"}, `MERIDIAN_SCHEDULE_PERIOD="soon"`},
		{"bad env port", nil, map[string]string{"MERIDIAN_EMBEDDED_NATS_PORT": "x"}, "MERIDIAN_EMBEDDED_NATS_PORT"},
		{"unknown flag", []string{"--frobnicate"}, nil, "frobnicate"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var stderr bytes.Buffer
			_, err := parseFlags(c.args, &stderr)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error()+stderr.String(), c.want) {
				t.Fatalf("error %q (stderr %q) does not mention %q", err, stderr.String(), c.want)
			}
		})
	}
}

func TestEnvironmentAndFlags(t *testing.T) {
	t.Setenv("MERIDIAN_ETCD_ENDPOINTS", "http://10.0.0.1:2379, http://10.0.0.2:2379")
	t.Setenv("MERIDIAN_NATS_URL", "nats://10.0.0.3:4222")
	t.Setenv("MERIDIAN_DATA_DIR", "/from/env")
	t.Setenv("MERIDIAN_HUB_DATA_DIR", "")
	t.Setenv("MERIDIAN_CLUSTER_TIMEOUT", "40s")
	o, err := parseFlags([]string{"--hub-id", "h1", "--grpc-addr", "127.0.0.1:9999"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := o.cfg
	if len(c.EtcdEndpoints) != 2 || c.EtcdEndpoints[1] != "http://10.0.0.2:2379" || c.NATSURL != "nats://10.0.0.3:4222" ||
		c.DataDir != "/from/env" || c.ClusterTimeout != 40*time.Second || c.HubID != "h1" || c.GRPCAddr != "127.0.0.1:9999" ||
		c.HTTPAddr != "127.0.0.1:8080" {
		t.Fatalf("config %+v", c)
	}
	// The hub-specific variable wins over the shared one; a flag wins over both.
	t.Setenv("MERIDIAN_HUB_DATA_DIR", "/hub/env")
	if o, _ := parseFlags(nil, io.Discard); o.cfg.DataDir != "/hub/env" {
		t.Fatalf("data dir %q", o.cfg.DataDir)
	}
	if o, _ := parseFlags([]string{"--data-dir", "/flag"}, io.Discard); o.cfg.DataDir != "/flag" {
		t.Fatalf("data dir %q", o.cfg.DataDir)
	}
	if _, err := parseFlags([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRunServesAndStops starts the real command with embedded etcd and
// NATS on free loopback ports, checks the banner, the address file and
// /readyz, then stops it as SIGTERM would (context cancel).
func TestRunServesAndStops(t *testing.T) {
	for _, k := range []string{"MERIDIAN_ETCD_ENDPOINTS", "MERIDIAN_NATS_URL", "MERIDIAN_GRPC_ADDR", "MERIDIAN_HTTP_ADDR"} {
		t.Setenv(k, "")
	}
	dir := t.TempDir()
	addrFile := filepath.Join(dir, "addrs.json")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout syncBuf
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--data-dir", filepath.Join(dir, "data"), "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
			"--embedded-nats-port", "0", "--addr-file", addrFile, "--log-level", "error"}, &stdout, io.Discard)
	}()
	var info addrInfo
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, err := os.ReadFile(addrFile); err == nil && json.Unmarshal(b, &info) == nil && info.HTTP != "" {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("run returned early: %v\n%s", err, stdout.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no address file after 20s\n%s", stdout.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for {
		resp, err := http.Get("http://" + info.HTTP + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 20s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	out := stdout.String()
	for _, want := range []string{"gRPC API  " + info.GRPC, "http://" + info.HTTP + "/metrics", info.NATS + " (embedded", "etcd      http://127.0.0.1:"} {
		if !strings.Contains(out, want) {
			t.Fatalf("banner lacks %q:\n%s", want, out)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after stop: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not stop within 15s")
	}
	if !strings.Contains(stdout.String(), "meridian-hub: stopped") {
		t.Fatalf("no stop line:\n%s", stdout.String())
	}
}
