package embednats

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// With Cluster.NoAdvertise a client connected to one node learns no other
// node's URL (a client behind a proxy stays behind it); without, it does.
func TestClusterNoAdvertise(t *testing.T) {
	for _, noAdv := range []bool{false, true} {
		t.Run(fmt.Sprintf("no-advertise=%t", noAdv), func(t *testing.T) {
			ports := loopbackPorts(t, 4)
			routes := []string{fmt.Sprintf("nats://127.0.0.1:%d", ports[2]), fmt.Sprintf("nats://127.0.0.1:%d", ports[3])}
			servers := make([]*Server, 2)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for i := range servers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					servers[i], errs[i] = Start(Config{StoreDir: t.TempDir(), Port: ports[i], ServerName: fmt.Sprintf("n%d", i+1),
						Cluster: &Cluster{Name: "test", Port: ports[2+i], Routes: routes, NoAdvertise: noAdv}})
				}()
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("node %d: %v", i+1, err)
				}
				t.Cleanup(func() { _ = servers[i].Close() })
			}
			nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", ports[0]))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			deadline := time.Now().Add(5 * time.Second)
			for len(nc.DiscoveredServers()) == 0 && !noAdv && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
				_ = nc.Flush()
			}
			if noAdv {
				time.Sleep(time.Second) // routes up: an advertisement would have come
				_ = nc.Flush()
			}
			if got := len(nc.DiscoveredServers()); (got > 0) == noAdv {
				t.Fatalf("discovered %v with NoAdvertise %t", nc.DiscoveredServers(), noAdv)
			}
		})
	}
}
