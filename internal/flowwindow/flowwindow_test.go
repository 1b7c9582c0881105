package flowwindow

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// countingListener counts the writes of every connection it accepts: each
// is one system call.
type countingListener struct {
	net.Listener
	writes *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.writes}, nil
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// serverWrites is how many writes a server makes to answer `calls` unary
// calls, one after another, with or without the fixed windows on both ends.
func serverWrites(t *testing.T, fixed bool, calls int) int64 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int64
	var sopts []grpc.ServerOption
	dopts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if fixed {
		sopts, dopts = ServerOptions(), append(dopts, DialOptions()...)
	}
	srv := grpc.NewServer(sopts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(countingListener{ln, &writes})
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), dopts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cli := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	if _, err := cli.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	before := writes.Load()
	for range calls {
		// Spaced like a steady load, so nothing waits to share a write.
		time.Sleep(time.Millisecond)
		if _, err := cli.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	return writes.Load() - before
}

// With fixed windows the server answers a unary call in fewer writes: no
// bandwidth-delay PING after each request.
func TestFixedWindowsWriteLess(t *testing.T) {
	const calls = 200
	dynamic, fixed := serverWrites(t, false, calls), serverWrites(t, true, calls)
	t.Logf("server writes for %d calls: %d with gRPC's estimator, %d with fixed windows", calls, dynamic, fixed)
	if fixed > calls*11/10 {
		t.Errorf("fixed windows: %d writes for %d calls, want about one per call", fixed, calls)
	}
	if fixed*3 > dynamic*2 {
		t.Errorf("fixed windows: %d writes, not a third fewer than the estimator's %d", fixed, dynamic)
	}
}
