package backup

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	embedetcd "github.com/meridian-gpu/meridian/internal/embedded/etcd"
)

// TestSaveAndRestoreEmbedded: a snapshot of a running member restores into
// a new data directory that the embedded etcd starts on, with every key
// and a revision beyond any the old member reached.
func TestSaveAndRestoreEmbedded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	old := t.TempDir()
	srv, err := embedetcd.Start(ctx, embedetcd.Config{DataDir: filepath.Join(old, "etcd"), UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := srv.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/meridian/workloads/w%03d", i), strings.Repeat("x", 100)); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := cli.Get(ctx, "/meridian/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(t.TempDir(), "meridian.snapshot")
	info, err := Save(ctx, clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second}, snap)
	if err != nil {
		t.Fatal(err)
	}
	if info.Revision < resp.Header.Revision || info.Bytes == 0 {
		t.Fatalf("saved %+v; etcd was at revision %d", info, resp.Header.Revision)
	}
	if _, err := Save(ctx, clientv3.Config{Endpoints: srv.Endpoints()}, snap); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("a second save over the same file: %v, want a refusal", err)
	}
	// Written after the snapshot: gone after the restore.
	if _, err := cli.Put(ctx, "/meridian/workloads/late", "x"); err != nil {
		t.Fatal(err)
	}
	_ = cli.Close()
	_ = srv.Close()

	fresh := t.TempDir()
	rinfo, err := RestoreEmbedded(snap, fresh)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := RestoreEmbedded(snap, fresh); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("a second restore into the same directory: %v, want a refusal", err)
	}
	srv2, err := embedetcd.Start(ctx, embedetcd.Config{DataDir: filepath.Join(fresh, "etcd"), UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Close()
	cli2, err := srv2.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cli2.Close()
	got, err := cli2.Get(ctx, "/meridian/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 200 {
		t.Fatalf("%d keys after the restore, want the 200 of the snapshot", len(got.Kvs))
	}
	if got.Header.Revision <= resp.Header.Revision+1 || got.Header.Revision < RevisionBump {
		t.Fatalf("revision %d after the restore; before it %d (restore said %d)", got.Header.Revision, resp.Header.Revision, rinfo.Revision)
	}
	if _, err := cli2.Put(ctx, "/meridian/after", "x"); err != nil {
		t.Fatalf("the restored member takes no write: %v", err)
	}
}

// TestSaveRefusesBadInput names what is wrong.
func TestSaveRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	if _, err := Save(ctx, clientv3.Config{Endpoints: []string{"http://127.0.0.1:1"}}, ""); err == nil || !strings.Contains(err.Error(), "path is empty") {
		t.Fatalf("empty path: %v", err)
	}
	if _, err := Save(ctx, clientv3.Config{}, filepath.Join(t.TempDir(), "s")); err == nil || !strings.Contains(err.Error(), "--etcd-endpoints") {
		t.Fatalf("no endpoint: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "not-a-snapshot")
	if err := os.WriteFile(bad, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := RestoreEmbedded(bad, t.TempDir()+"/x"); err == nil || !strings.Contains(err.Error(), "not a readable etcd snapshot") {
		t.Fatalf("restore of a non-snapshot: %v", err)
	}
}
