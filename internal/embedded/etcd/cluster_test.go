package embedetcd

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestClusterRejectsBadConfig(t *testing.T) {
	dir := t.TempDir()
	good := "m1=http://127.0.0.1:23801,m2=http://127.0.0.1:23802,m3=http://127.0.0.1:23803"
	tests := map[string]struct {
		cfg  Config
		want string
	}{
		"free ports":       {Config{DataDir: dir, Name: "m1", Cluster: &Cluster{InitialCluster: good}}, "fixed ports"},
		"not named":        {Config{DataDir: dir, Name: "m9", ClientPort: 23791, PeerPort: 23801, Cluster: &Cluster{InitialCluster: good}}, `does not name this member "m9"`},
		"wrong peer port":  {Config{DataDir: dir, Name: "m1", ClientPort: 23791, PeerPort: 23809, Cluster: &Cluster{InitialCluster: good}}, "Config.PeerPort is 23809"},
		"not loopback":     {Config{DataDir: dir, Name: "m1", ClientPort: 23791, PeerPort: 23801, Cluster: &Cluster{InitialCluster: "m1=http://10.0.0.1:23801"}}, "loopback only"},
		"no name":          {Config{DataDir: dir, Name: "m1", ClientPort: 23791, PeerPort: 23801, Cluster: &Cluster{InitialCluster: "http://127.0.0.1:23801"}}, "not name=http"},
		"bad state":        {Config{DataDir: dir, Name: "m1", ClientPort: 23791, PeerPort: 23801, Cluster: &Cluster{InitialCluster: good, State: "old"}}, "Cluster.State"},
		"election too low": {Config{DataDir: dir, Name: "m1", ClientPort: 23791, PeerPort: 23801, Cluster: &Cluster{InitialCluster: good, ElectionTimeout: 200 * time.Millisecond}}, "ElectionTimeout"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, err := Start(context.Background(), tc.cfg)
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

// TestClusterOfThree forms a three-member cluster in this process, writes
// through one member and reads through another, and keeps writing after
// the leader is closed.
func TestClusterOfThree(t *testing.T) {
	ports := loopbackPorts(t, 6)
	var members []string
	for i := 0; i < 3; i++ {
		members = append(members, fmt.Sprintf("m%d=http://127.0.0.1:%d", i+1, ports[3+i]))
	}
	initial := strings.Join(members, ",")
	servers := make([]*Server, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			servers[i], errs[i] = Start(context.Background(), Config{
				DataDir: t.TempDir(), Name: fmt.Sprintf("m%d", i+1), ClientPort: ports[i], PeerPort: ports[3+i],
				UnsafeNoFsync: true, Cluster: &Cluster{InitialCluster: initial, Token: "test"},
			})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d: %v", i+1, err)
		}
		t.Cleanup(func() { _ = servers[i].Close() })
	}
	var endpoints []string
	for _, s := range servers {
		endpoints = append(endpoints, s.Endpoints()...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c1, err := servers[0].Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	if _, err := c1.Put(ctx, "k", "v1"); err != nil {
		t.Fatalf("put: %v", err)
	}
	c3, err := servers[2].Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	got, err := c3.Get(ctx, "k")
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v1" {
		t.Fatalf("get through member 3: %v %v", got, err)
	}
	ml, err := c1.MemberList(ctx)
	if err != nil || len(ml.Members) != 3 {
		t.Fatalf("member list: %v, %v", ml, err)
	}
	// Close the leader; the two left elect another and take writes.
	st, err := c1.Status(ctx, endpoints[0])
	if err != nil {
		t.Fatal(err)
	}
	lead := -1
	for i, s := range servers {
		if s.etcd != nil && uint64(s.etcd.Server.MemberID()) == st.Leader {
			lead = i
		}
	}
	if lead < 0 {
		t.Fatalf("leader %x is none of the members", st.Leader)
	}
	_ = servers[lead].Close()
	var rest []string
	for i := range servers {
		if i != lead {
			rest = append(rest, endpoints[i])
		}
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: rest, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.Put(pctx, "k", "v2")
		pcancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write accepted after the leader closed: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
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
