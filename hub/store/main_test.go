package store

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	embedetcd "github.com/meridian-gpu/meridian/internal/embedded/etcd"
)

var srv *embedetcd.Server

func TestMain(m *testing.M) {
	var stop func()
	var err error
	if srv, stop, err = embedetcd.StartTemp("store-etcd-"); err != nil {
		fmt.Fprintln(os.Stderr, "start embedded etcd:", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

func newClient(t testing.TB) *clientv3.Client {
	t.Helper()
	c, err := srv.Client(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// inProcess makes newStore use the member's in-process client and KV, as
// the hub does with its embedded etcd (TestCommitInProcess).
var inProcess bool

func newStore(t testing.TB) *Store {
	t.Helper()
	if inProcess {
		c, err := srv.InProcessClient()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		kv, err := srv.InProcessKV()
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(c, Options{MaxTxnOps: srv.MaxTxnOps(), KV: kv})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s, err := New(newClient(t), Options{MaxTxnOps: srv.MaxTxnOps()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var prefixSeq atomic.Int64

// testPrefix gives each test (and each -count repetition) its own key space
// on the shared server.
func testPrefix(t testing.TB) string {
	return fmt.Sprintf("/t/%s/%d/", strings.ReplaceAll(t.Name(), "/", "_"), prefixSeq.Add(1))
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
