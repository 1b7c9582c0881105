package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// startHub runs meridian-hub on embedded etcd and NATS with free ports
// until the returned stop is called, and returns its addresses.
func startHub(t *testing.T, dataDir string, extra ...string) (addrInfo, func()) {
	t.Helper()
	addrFile := filepath.Join(t.TempDir(), "addrs.json")
	ctx, cancel := context.WithCancel(context.Background())
	var stdout syncBuf
	done := make(chan error, 1)
	args := append([]string{"--data-dir", dataDir, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--embedded-nats-port", "0", "--addr-file", addrFile, "--log-level", "error"}, extra...)
	go func() { done <- run(ctx, args, &stdout, io.Discard) }()
	var info addrInfo
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(addrFile); err == nil && json.Unmarshal(b, &info) == nil && len(info.Etcd) > 0 {
			break
		}
		select {
		case err := <-done:
			cancel()
			t.Fatalf("meridian-hub returned early: %v\n%s", err, stdout.String())
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no address file after 30s\n%s", stdout.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return info, func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("meridian-hub did not stop within 20s")
		}
	}
}

func etcdDo(t *testing.T, endpoints []string, f func(context.Context, *clientv3.Client)) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f(ctx, cli)
}

// TestSnapshotSaveAndRestore: `snapshot save` of a running hub's embedded
// etcd, `snapshot restore` into a new data directory, and a hub started
// there with --after-restore serves the snapshot's data.
func TestSnapshotSaveAndRestore(t *testing.T) {
	for _, k := range []string{"MERIDIAN_ETCD_ENDPOINTS", "MERIDIAN_NATS_URL", "MERIDIAN_GRPC_ADDR", "MERIDIAN_HTTP_ADDR"} {
		t.Setenv(k, "")
	}
	oldDir, newDir := filepath.Join(t.TempDir(), "old"), filepath.Join(t.TempDir(), "new")
	info, stop := startHub(t, oldDir)
	etcdDo(t, info.Etcd, func(ctx context.Context, cli *clientv3.Client) {
		if _, err := cli.Put(ctx, "/meridian-test/before", "kept"); err != nil {
			t.Fatal(err)
		}
	})
	file := filepath.Join(t.TempDir(), "federation.snapshot")
	var out bytes.Buffer
	cmd := newCommand(&out, io.Discard, nil)
	cmd.SetArgs([]string{"snapshot", "save", file, "--etcd-endpoints", strings.Join(info.Etcd, ",")})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("snapshot save: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "snapshot: saved "+file) {
		t.Fatalf("save printed:\n%s", out.String())
	}
	etcdDo(t, info.Etcd, func(ctx context.Context, cli *clientv3.Client) {
		if _, err := cli.Put(ctx, "/meridian-test/after", "lost"); err != nil {
			t.Fatal(err)
		}
	})
	stop()

	out.Reset()
	cmd = newCommand(&out, io.Discard, nil)
	cmd.SetArgs([]string{"snapshot", "restore", file, "--data-dir", newDir})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("snapshot restore: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "--after-restore") {
		t.Fatalf("restore does not say how to start the hub:\n%s", out.String())
	}
	info2, stop2 := startHub(t, newDir, "--after-restore")
	defer stop2()
	etcdDo(t, info2.Etcd, func(ctx context.Context, cli *clientv3.Client) {
		got, err := cli.Get(ctx, "/meridian-test/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Kvs) != 1 || string(got.Kvs[0].Key) != "/meridian-test/before" {
			t.Fatalf("after the restore: %v, want the key written before the snapshot only", got.Kvs)
		}
	})
	// A restore never lands on data that is there.
	out.Reset()
	cmd = newCommand(&out, io.Discard, nil)
	cmd.SetArgs([]string{"snapshot", "restore", file, "--data-dir", newDir})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("restore over a data directory with an etcd: %v", err)
	}
}
