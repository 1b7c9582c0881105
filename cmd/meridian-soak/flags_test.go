package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

// TestServersRefuseNonLoopback: etcd-member and nats-node listen on
// 127.0.0.1 only, and say so when given anything else.
func TestServersRefuseNonLoopback(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"etcd client url elsewhere": {[]string{"etcd-member", "--name", "m1", "--data-dir", dir, "--client-url", "http://0.0.0.0:2379",
			"--peer-url", "http://127.0.0.1:2380", "--initial-cluster", "m1=http://127.0.0.1:2380"}, "--client-url: want http://127.0.0.1:PORT"},
		"etcd peer url https": {[]string{"etcd-member", "--name", "m1", "--data-dir", dir, "--client-url", "http://127.0.0.1:2379",
			"--peer-url", "https://127.0.0.1:2380", "--initial-cluster", "m1=http://127.0.0.1:2380"}, "--peer-url: want http://127.0.0.1:PORT"},
		"etcd peer elsewhere": {[]string{"etcd-member", "--name", "m1", "--data-dir", dir, "--client-url", "http://127.0.0.1:2379",
			"--peer-url", "http://127.0.0.1:2380", "--initial-cluster", "m1=http://127.0.0.1:2380,m2=http://10.1.1.1:2380"}, "loopback only"},
		"etcd missing flag": {[]string{"etcd-member", "--name", "m1"}, "required flag"},
		"nats route elsewhere": {[]string{"nats-node", "--name", "n1", "--port", "4222", "--cluster-port", "6222",
			"--routes", "nats://10.0.0.2:6222", "--store-dir", dir}, "loopback only"},
		"up without dir":    {[]string{"up"}, `required flag(s) "dir"`},
		"run without dir":   {[]string{"run"}, `required flag(s) "dir"`},
		"run unknown fault": {[]string{"run", "--dir", dir, "--faults", "hub-kill,meteor"}, `--faults: unknown kind "meteor"`},
		"run one agent":     {[]string{"run", "--dir", dir, "--agents", "1"}, "--agents must be at least 2"},
		"run too short":     {[]string{"run", "--dir", dir, "--duration", "5s"}, "--duration at least 30s"},
	} {
		t.Run(name, func(t *testing.T) {
			err := run(context.Background(), tc.args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run %v = %v, want an error with %q", tc.args, err, tc.want)
			}
		})
	}
}
