package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	hubconfig "github.com/meridian-gpu/meridian/hub/config"
	"github.com/meridian-gpu/meridian/hub/dispatch"
	"github.com/meridian-gpu/meridian/hub/retention"
	"github.com/meridian-gpu/meridian/hub/server"
	cc "github.com/meridian-gpu/meridian/internal/componentconfig"
)

// TestConfigFilePrecedence: the file sets what nothing else does, the
// environment wins over it, a flag wins over both.
func TestConfigFilePrecedence(t *testing.T) {
	clearNATSEnv(t)
	for _, k := range []string{"MERIDIAN_SCHEDULE_PERIOD", "MERIDIAN_CLUSTER_TIMEOUT", "MERIDIAN_LEADER_TTL", "MERIDIAN_HUB_ID",
		"MERIDIAN_HUB_DATA_DIR", "MERIDIAN_DATA_DIR", "MERIDIAN_RETENTION_TTL", "MERIDIAN_NO_SCHEDULER"} {
		t.Setenv(k, "")
	}
	file := writeTemp(t, "hub.yaml", `apiVersion: meridian.io/v1alpha1
kind: HubConfiguration
hubID: from-file
dataDir: /file/data
api:
  grpcAddr: 127.0.0.1:7001
  httpAddr: 127.0.0.1:8001
etcd:
  endpoints: [http://10.0.0.1:2379]
scheduling:
  period: 2s
  clusterTimeout: 20s
  leaderTTL: 7s
retention:
  ttl: 48h
`)
	t.Setenv("MERIDIAN_GRPC_ADDR", "127.0.0.1:7002")
	t.Setenv("MERIDIAN_CLUSTER_TIMEOUT", "30s")
	t.Setenv("MERIDIAN_DATA_DIR", "/env/data")
	t.Setenv("MERIDIAN_NO_SCHEDULER", "1")
	o, err := parseFlags([]string{"--config", file, "--cluster-timeout", "40s", "--hub-id", "from-flag", "--etcd-endpoints", "http://10.0.0.2:2379,http://10.0.0.3:2379"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := o.cfg
	for _, tc := range []struct {
		what      string
		got, want any
	}{
		{"http addr (file)", c.HTTPAddr, "127.0.0.1:8001"},
		{"schedule period (file)", c.SchedulePeriod, 2 * time.Second},
		{"leader ttl (file)", c.LeaderTTL, 7 * time.Second},
		{"retention ttl (file)", c.RetentionTTL, 48 * time.Hour},
		{"grpc addr (env over file)", c.GRPCAddr, "127.0.0.1:7002"},
		{"data dir (shared env over file)", c.DataDir, "/env/data"},
		{"no scheduler (env)", c.NoScheduler, true},
		{"cluster timeout (flag over env over file)", c.ClusterTimeout, 40 * time.Second},
		{"hub id (flag over file)", c.HubID, "from-flag"},
		{"etcd endpoints (flag list replaces the file's)", strings.Join(c.EtcdEndpoints, " "), "http://10.0.0.2:2379 http://10.0.0.3:2379"},
		{"max request bytes (default)", c.MaxRequestBytes, hubconfig.DefaultMaxRequestBytes},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.what, tc.got, tc.want)
		}
	}
	// The new sections are loaded, validated and kept for the server.
	o, err = parseFlags([]string{"--auth", "none", "--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-client-ca", "ca.pem",
		"--audit-log", "-", "--insecure-allow-plaintext-non-loopback"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if a := o.conf; a.Auth.Mode != "none" || a.API.TLS.CertFile != "c.pem" || a.API.TLS.ClientCAFile != "ca.pem" || a.Audit.File != "-" || !a.API.AllowInsecureNonLoopback {
		t.Errorf("auth, tls, audit flags: %+v %+v %+v", a.Auth, a.API, a.Audit)
	}
}

func TestConfigFileErrorsAllAtOnce(t *testing.T) {
	clearNATSEnv(t)
	t.Setenv("MERIDIAN_SCHEDULE_PERIOD", "")
	file := writeTemp(t, "hub.yaml", `apiVersion: meridian.io/v1alpha1
kind: HubConfiguration
api:
  grpcAdr: 127.0.0.1:7070
scheduling:
  period: 0s
retention:
  ttl: 1h
auth:
  mode: maybe
  authorization:
    groupPermissions:
      ops: [admin, rooot]
`)
	for _, args := range [][]string{{"--config", file}, {"config", "validate", "--config", file}} {
		err := run(context.Background(), args, io.Discard, io.Discard)
		l, ok := cc.AsErrorList(err)
		if !ok {
			t.Fatalf("%v: err %v, want the list of problems", args, err)
		}
		want := []string{
			file + `:4: api.grpcAdr: unknown field "grpcAdr"; did you mean "grpcAddr"?`,
			file + ":6: scheduling.period: must be positive (got 0s)",
			file + ":8: retention.ttl: must be 0 (keep finished workloads forever) or at least 24h",
			file + `:10: auth.mode: want on or none (got "maybe")`,
			file + `:12: auth.authorization.groupPermissions.ops[1]: unknown permission "rooot"`,
		}
		if len(l) != len(want) {
			t.Fatalf("%v: %d problems, want %d:\n%v", args, len(l), len(want), err)
		}
		for i, w := range want {
			if !strings.HasPrefix(l[i].Error(), w) {
				t.Errorf("%v: problem %d = %q, want %q", args, i, l[i].Error(), w)
			}
		}
		var out bytes.Buffer
		cc.PrintError(&out, "meridian-hub", err)
		if !strings.HasPrefix(out.String(), "meridian-hub: invalid configuration (5 problems):\n  "+file+":4:") {
			t.Errorf("printed:\n%s", out.String())
		}
	}
	var stdout bytes.Buffer
	example := filepath.Join("..", "..", "examples", "config", "hub.yaml")
	if err := run(context.Background(), []string{"config", "validate", "--config", example}, &stdout, io.Discard); err != nil {
		t.Fatalf("the example: %v", err)
	}
	if !strings.Contains(stdout.String(), "valid HubConfiguration") {
		t.Errorf("validate printed %q", stdout.String())
	}
}

// TestPrintConfigRedactsSecrets prints the effective configuration with a
// NATS token and password in the environment.
func TestPrintConfigRedactsSecrets(t *testing.T) {
	clearNATSEnv(t)
	t.Setenv("MERIDIAN_NATS_URL", "nats://10.0.0.3:4222")
	t.Setenv("MERIDIAN_NATS_TOKEN", "s3cret-token")
	t.Setenv("MERIDIAN_NATS_PASSWORD", "s3cret-pw")
	t.Setenv("MERIDIAN_LEADER_TTL", "")
	for _, args := range [][]string{{"--print-config", "--leader-ttl", "9s"}, {"config", "print", "--leader-ttl", "9s"}} {
		var stdout bytes.Buffer
		if err := run(context.Background(), args, &stdout, io.Discard); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		out := stdout.String()
		if strings.Contains(out, "s3cret") {
			t.Fatalf("%v printed a secret:\n%s", args, out)
		}
		for _, w := range []string{"kind: HubConfiguration", "token: " + cc.Redacted, "password: " + cc.Redacted, "url: nats://10.0.0.3:4222", "leaderTTL: 9s"} {
			if !strings.Contains(out, w) {
				t.Errorf("%v: output lacks %q:\n%s", args, w, out)
			}
		}
	}
}

// TestDefaultsAgreeWithServer: hub/config repeats the server's defaults
// (it may not import the server); they must not drift apart.
func TestDefaultsAgreeWithServer(t *testing.T) {
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"leader TTL", time.Duration(hubconfig.DefaultLeaderTTL), server.DefaultLeaderTTL},
		{"GC percent", hubconfig.DefaultGCPercent, server.DefaultGCPercent},
		{"minimum idempotency window", time.Duration(hubconfig.MinIdempotencyWindow), server.MinIdempotencyWindow},
		{"idempotency window", time.Duration(hubconfig.DefaultIdempotencyWindow), retention.IdempotencyWindow},
		{"retention TTL", time.Duration(hubconfig.DefaultRetentionTTL), retention.DefaultTTL},
		{"retention per queue", hubconfig.DefaultMaxPerQueue, retention.DefaultMaxPerQueue},
		{"scheduling window", hubconfig.DefaultScheduleWindow, dispatch.DefaultWindow},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: hub/config has %v, the server %v", tc.name, tc.got, tc.want)
		}
	}
}

// TestEveryFlagKept lists the flags meridian-hub had before the
// configuration file; each must still exist.
func TestEveryFlagKept(t *testing.T) {
	cmd := newCommand(io.Discard, io.Discard, nil)
	for _, name := range []string{"gc-percent", "data-dir", "etcd-endpoints", "etcd-max-txn-ops", "nats-url", "nats-creds", "nats-nkey",
		"nats-user", "nats-password-file", "nats-token-file", "nats-tls-ca", "nats-tls-cert", "nats-tls-key", "embedded-nats-port",
		"embedded-etcd-port", "grpc-addr", "http-addr", "hub-id", "schedule-period", "cluster-timeout", "leader-ttl", "max-request-bytes",
		"retention-ttl", "retention-max-finished-per-queue", "idempotency-window", "no-scheduler", "addr-file", "log-level", "log-format",
		"config", "print-config", "auth", "tls-cert", "tls-key", "tls-client-ca", "audit-log", "insecure-allow-plaintext-non-loopback"} {
		if cmd.Flag(name) == nil {
			t.Errorf("flag --%s is gone", name)
		}
	}
}
