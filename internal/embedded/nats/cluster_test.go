package embednats

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestClusterRejectsBadConfig(t *testing.T) {
	dir := t.TempDir()
	tests := map[string]struct {
		cfg  Config
		want string
	}{
		"no route port":    {Config{StoreDir: dir, Port: 14222, Cluster: &Cluster{}}, "Cluster.Port"},
		"same ports":       {Config{StoreDir: dir, Port: 14222, Cluster: &Cluster{Port: 14222}}, "both 14222"},
		"free client port": {Config{StoreDir: dir, Cluster: &Cluster{Port: 16222}}, "fixed Config.Port"},
		"not loopback":     {Config{StoreDir: dir, Port: 14222, Cluster: &Cluster{Port: 16222, Routes: []string{"nats://10.0.0.1:6222"}}}, "loopback only"},
		"not nats":         {Config{StoreDir: dir, Port: 14222, Cluster: &Cluster{Port: 16222, Routes: []string{"http://127.0.0.1:6222"}}}, "not nats://"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, err := Start(tc.cfg)
			if err == nil {
				_ = s.Close()
				t.Fatalf("Start succeeded, want an error with %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// TestClusterOfThreeWithR3Stream forms a three-node JetStream cluster in
// this process, makes a stream with three replicas, and keeps publishing
// to it with one node closed.
func TestClusterOfThreeWithR3Stream(t *testing.T) {
	ports := loopbackPorts(t, 6)
	var routes, urls []string
	for i := 0; i < 3; i++ {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[3+i]))
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	servers := make([]*Server, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			servers[i], errs[i] = Start(Config{StoreDir: t.TempDir(), Port: ports[i], ServerName: fmt.Sprintf("n%d", i+1),
				Cluster: &Cluster{Name: "test", Port: ports[3+i], Routes: routes}})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
		t.Cleanup(func() { _ = servers[i].Close() })
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The meta leader is elected a moment after the nodes start.
	var st jetstream.Stream
	retry(t, ctx, "create the R3 stream", func(ctx context.Context) (err error) {
		st, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Replicas: 3})
		return err
	})
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("stream has %d replicas, cluster %+v; want 3", info.Config.Replicas, info.Cluster)
	}
	if _, err := js.Publish(ctx, "t.a", []byte("one")); err != nil {
		t.Fatal(err)
	}
	_ = servers[0].Close()
	retry(t, ctx, "publish with a node closed", func(ctx context.Context) error {
		_, err := js.Publish(ctx, "t.a", []byte("two"))
		return err
	})
	retry(t, ctx, "read both messages", func(ctx context.Context) error {
		info, err := st.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs < 2 {
			return fmt.Errorf("%d messages", info.State.Msgs)
		}
		return nil
	})
}

func retry(t *testing.T, ctx context.Context, what string, f func(context.Context) error) {
	t.Helper()
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := f(actx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// loopbackPorts returns n distinct free loopback ports.
func loopbackPorts(t *testing.T, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return ports
}
