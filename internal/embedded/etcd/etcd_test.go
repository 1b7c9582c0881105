package embedetcd

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestStartRejectsBadConfig(t *testing.T) {
	dir := t.TempDir()
	tests := map[string]struct {
		cfg       Config
		wantField string
	}{
		"missing data dir":     {Config{}, "DataDir"},
		"blank data dir":       {Config{DataDir: "  "}, "DataDir"},
		"negative client port": {Config{DataDir: dir, ClientPort: -1}, "ClientPort"},
		"huge peer port":       {Config{DataDir: dir, PeerPort: 70000}, "PeerPort"},
		"same ports":           {Config{DataDir: dir, ClientPort: 23000, PeerPort: 23000}, "PeerPort"},
		"negative txn ops":     {Config{DataDir: dir, MaxTxnOps: -5}, "MaxTxnOps"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, err := Start(context.Background(), tc.cfg)
			if err == nil {
				_ = s.Close()
				t.Fatalf("Start(%+v) succeeded, want an error naming %s", tc.cfg, tc.wantField)
			}
			if !strings.Contains(err.Error(), tc.wantField) {
				t.Fatalf("error %q does not name field %s", err, tc.wantField)
			}
		})
	}
}

func TestDataSurvivesCloseAndStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()

	s, err := Start(ctx, Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first start: %s (endpoints %v)", s.StartupTime(), s.Endpoints())
	if eps := s.Endpoints(); len(eps) != 1 || !strings.HasPrefix(eps[0], "http://127.0.0.1:") {
		t.Fatalf("Endpoints() = %v, want one loopback URL", eps)
	}
	c, err := s.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	for i := 0; i < n; i++ {
		if _, err := c.Put(ctx, fmt.Sprintf("/k/%03d", i), fmt.Sprintf("v%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	s2, err := Start(ctx, Config{DataDir: dir})
	if err != nil {
		t.Fatalf("restart on the same dir: %v", err)
	}
	defer s2.Close()
	t.Logf("restart on existing data: %s", s2.StartupTime())
	c2, err := s2.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	resp, err := c2.Get(ctx, "/k/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != n {
		t.Fatalf("after restart got %d keys, want %d", len(resp.Kvs), n)
	}
	for i, kv := range resp.Kvs {
		if want := fmt.Sprintf("v%d", i); string(kv.Value) != want {
			t.Fatalf("key %s = %q, want %q", kv.Key, kv.Value, want)
		}
	}
}

func TestRestartKeepsPortsAndData(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, Config{DataDir: t.TempDir(), UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before := s.Endpoints()[0]
	c, err := s.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Put(ctx, "a", "1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("restart: %s", s.StartupTime())
	if after := s.Endpoints()[0]; after != before {
		t.Fatalf("endpoint moved from %s to %s", before, after)
	}
	// The old client reconnects by itself.
	var got string
	for i := 0; i < 50; i++ {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		resp, err := c.Get(rctx, "a")
		rcancel()
		if err == nil && len(resp.Kvs) == 1 {
			got = string(resp.Kvs[0].Value)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got != "1" {
		t.Fatalf("after restart a = %q, want 1", got)
	}
}

func TestLargeTransactionsAllowed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, Config{DataDir: t.TempDir(), UnsafeNoFsync: true, MaxTxnOps: 500})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := s.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ops := func(n int) []clientv3.Op {
		out := make([]clientv3.Op, n)
		for i := range out {
			out[i] = clientv3.OpPut(fmt.Sprintf("/big/%d", i), "x")
		}
		return out
	}
	if _, err := c.Txn(ctx).Then(ops(500)...).Commit(); err != nil {
		t.Fatalf("500-op txn (above stock limit 128) refused: %v", err)
	}
	if _, err := c.Txn(ctx).Then(ops(501)...).Commit(); err == nil {
		t.Fatal("501-op txn accepted, want too-many-operations error")
	}
}

// The in-process client reads, writes, transacts and watches like a
// socket client, sees what the socket client wrote, and is refused once
// the member is closed.
func TestInProcessClientSharesTheMember(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, Config{DataDir: t.TempDir(), UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	in, err := s.InProcessClient()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := s.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()

	wch := in.Watch(ctx, "/k/", clientv3.WithPrefix())
	if _, err := out.Put(ctx, "/k/a", "from-socket"); err != nil {
		t.Fatal(err)
	}
	resp, err := in.Txn(ctx).If(clientv3.Compare(clientv3.Value("/k/a"), "=", "from-socket")).
		Then(clientv3.OpPut("/k/b", "from-process")).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("in-process txn: %v, succeeded=%v", err, resp != nil && resp.Succeeded)
	}
	got, err := out.Get(ctx, "/k/b")
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "from-process" {
		t.Fatalf("socket client reads %v, %v", got, err)
	}
	var seen []string
	for len(seen) < 2 {
		select {
		case wr := <-wch:
			for _, ev := range wr.Events {
				seen = append(seen, string(ev.Kv.Key))
			}
		case <-ctx.Done():
			t.Fatalf("watch saw %v", seen)
		}
	}
	if seen[0] != "/k/a" || seen[1] != "/k/b" {
		t.Fatalf("watch order %v", seen)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.InProcessClient(); err == nil {
		t.Fatal("InProcessClient on a closed member succeeded")
	}
}

// History older than CompactEvery is dropped by the member itself.
func TestOldHistoryIsCompacted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, Config{DataDir: t.TempDir(), UnsafeNoFsync: true, CompactEvery: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := s.InProcessClient()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	first, err := c.Put(ctx, "/h/k", "v0")
	if err != nil {
		t.Fatal(err)
	}
	written := time.Now()
	deadline := time.Now().Add(15 * time.Second)
	for i := 1; ; i++ {
		if _, err := c.Put(ctx, "/h/k", fmt.Sprint("v", i)); err != nil {
			t.Fatal(err)
		}
		_, err := c.Get(ctx, "/h/k", clientv3.WithRev(first.Header.Revision))
		if err != nil && strings.Contains(err.Error(), "compacted") {
			// The promise is the other way too: history younger than
			// CompactEvery stays.
			if age := time.Since(written); age < time.Second {
				t.Fatalf("revision %d compacted %s after it was written, before CompactEvery (1s)", first.Header.Revision, age)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("revision %d still readable after 15 s with CompactEvery 1s (last err %v)", first.Header.Revision, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// StartTemp's member serves, and stop closes it and removes its directory.
func TestStartTempCleansUp(t *testing.T) {
	s, stop, err := StartTemp("etcd-temp-test-")
	if err != nil {
		t.Fatal(err)
	}
	dir := s.cfg.DataDir
	c, err := s.InProcessClient()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "/k", "v"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	stop()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("data dir %s still there after stop (%v)", dir, err)
	}
}

// The member may grow to QuotaBackendBytes, not etcd's 2 GiB default: at
// high rates the history kept until compaction alone would fill that.
func TestQuotaIsRaised(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, Config{DataDir: t.TempDir(), UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "etcd_server_quota_backend_bytes" {
			if got := mf.GetMetric()[0].GetGauge().GetValue(); got != QuotaBackendBytes {
				t.Fatalf("quota %.0f bytes, want %d", got, int64(QuotaBackendBytes))
			}
			return
		}
	}
	t.Fatal("etcd_server_quota_backend_bytes is not exported")
}
