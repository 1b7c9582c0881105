package topology

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	embedetcd "github.com/meridian-gpu/meridian/internal/embedded/etcd"
	"github.com/meridian-gpu/meridian/internal/localrun"
	"github.com/meridian-gpu/meridian/internal/soak/procs"
	"github.com/meridian-gpu/meridian/internal/soak/proxy"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// Config says what to bring up.
type Config struct {
	// Dir holds every part's data and D/logs/<name>.log. Required.
	Dir string
	// HubBin and AgentBin are the meridian-hub and meridian-agent
	// programs. Required.
	HubBin, AgentBin string
	// SoakBin is a program that runs "etcd-member ..." and "nats-node
	// ..." as meridian-soak does (meridian-soak itself, or a test binary
	// standing in for it), with SoakEnv added to its environment.
	SoakBin string
	SoakEnv []string
	// Hubs and Agents count the hub replicas and the agents; 0 means 3
	// and 4.
	Hubs, Agents int
	// SimExample is the simulated cluster every agent runs (meridian-agent
	// --sim-example); empty means "h100-nvlink" (64 H100s).
	SimExample string
	// SimConfig, when set, is a simulated cluster file every agent runs
	// (meridian-agent --sim-config) instead of SimExample.
	SimConfig string
	// EtcdCompactEvery is the etcd members' periodic compaction
	// (etcd-member --compact-every); 0 keeps their default, negative
	// keeps all history.
	EtcdCompactEvery time.Duration
	// TimeScale is the simulated clusters' simulated seconds per second;
	// 0 means 1 (a workload labelled 2s runs two seconds).
	TimeScale float64
	// LeaderTTL, SchedulePeriod and ClusterTimeout are the hubs'; 0
	// keeps meridian-hub's defaults.
	LeaderTTL, SchedulePeriod, ClusterTimeout time.Duration
	// HubArgs are further flags for every hub.
	HubArgs []string
	// AgentProxies puts a TCP proxy (internal/soak/proxy) between each
	// agent and each NATS node, so that an agent can be cut off from NATS
	// or slowed down (Agent.Proxies); the nodes then advertise no other
	// URLs to clients, so an agent reconnects only through its proxies.
	AgentProxies bool
	// Progress receives one line per step; nil drops them.
	Progress io.Writer
	// ReadyTimeout bounds each wait for readiness; 0 means 60 s.
	ReadyTimeout time.Duration
}

// EtcdMember is one etcd process.
type EtcdMember struct {
	Name, ClientURL, PeerURL string
	Proc                     *procs.Proc
}

// NATSNode is one NATS process.
type NATSNode struct {
	Name, ClientURL, RouteURL string
	Proc                      *procs.Proc
}

// Hub is one meridian-hub replica.
type Hub struct {
	ID         string
	GRPC, HTTP string // loopback host:port
	Proc       *procs.Proc
}

// Agent is one meridian-agent with its simulated cluster.
type Agent struct {
	ClusterID string
	// Journal is the simulated cluster's launch journal
	// (simcluster.JournalEntry lines), <Dir>/journals/<ClusterID>.jsonl.
	Journal string
	Proc    *procs.Proc
	// Proxies stand between the agent and each NATS node, with
	// Config.AgentProxies.
	Proxies []*proxy.Proxy
}

// CutOff cuts the agent off from NATS (true) or lets it back (false).
func (a *Agent) CutOff(on bool) {
	for _, p := range a.Proxies {
		p.Cut(on)
	}
}

// SetLatency delays the agent's NATS traffic by d each way (0: none).
func (a *Agent) SetLatency(d time.Duration) {
	for _, p := range a.Proxies {
		p.SetLatency(d)
	}
}

// Topology is a running federation.
type Topology struct {
	cfg    Config
	Group  *procs.Group
	Etcd   []*EtcdMember
	NATS   []*NATSNode
	Hubs   []*Hub
	Agents []*Agent
	// TokenFile holds the admin API token every hub accepts; Token is it.
	TokenFile, Token string

	closeOnce sync.Once
}

// Up brings the federation up (see the package doc) and returns it ready.
// On failure everything it started is stopped again.
func Up(ctx context.Context, cfg Config) (_ *Topology, err error) {
	if cfg.Dir == "" || cfg.HubBin == "" || cfg.AgentBin == "" || cfg.SoakBin == "" {
		return nil, errors.New("topology: Config.Dir, HubBin, AgentBin and SoakBin are required")
	}
	if cfg.Hubs == 0 {
		cfg.Hubs = 3
	}
	if cfg.Agents == 0 {
		cfg.Agents = 4
	}
	if cfg.SimExample == "" {
		cfg.SimExample = "h100-nvlink"
	}
	if cfg.TimeScale == 0 {
		cfg.TimeScale = 1
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 60 * time.Second
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	g, err := procs.NewGroup(filepath.Join(cfg.Dir, "logs"))
	if err != nil {
		return nil, err
	}
	t := &Topology{cfg: cfg, Group: g, TokenFile: filepath.Join(cfg.Dir, "admin.token")}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	// Client and peer ports of etcd, client and route ports of NATS, and
	// the hubs' gRPC and HTTP ports.
	ports, err := freePorts(12 + 2*cfg.Hubs)
	if err != nil {
		return nil, err
	}
	for i := 0; i < 3; i++ {
		t.Etcd = append(t.Etcd, &EtcdMember{Name: fmt.Sprintf("etcd-%d", i+1),
			ClientURL: "http://127.0.0.1:" + strconv.Itoa(ports[i]), PeerURL: "http://127.0.0.1:" + strconv.Itoa(ports[3+i])})
	}
	more := ports[6:]
	for i := 0; i < 3; i++ {
		t.NATS = append(t.NATS, &NATSNode{Name: fmt.Sprintf("nats-%d", i+1),
			ClientURL: "nats://127.0.0.1:" + strconv.Itoa(more[i]), RouteURL: "nats://127.0.0.1:" + strconv.Itoa(more[3+i])})
	}
	for i := 0; i < cfg.Hubs; i++ {
		t.Hubs = append(t.Hubs, &Hub{ID: fmt.Sprintf("hub-%d", i+1),
			GRPC: "127.0.0.1:" + strconv.Itoa(ports[12+2*i]), HTTP: "127.0.0.1:" + strconv.Itoa(ports[13+2*i])})
	}
	steps := []struct {
		what string
		run  func(context.Context) error
	}{
		{"etcd cluster (3 members)", t.startEtcd},
		{"NATS cluster (3 nodes, JetStream)", t.startNATS},
		{fmt.Sprintf("hubs (%d replicas)", cfg.Hubs), t.startHubs},
		{fmt.Sprintf("agents (%d simulated clusters)", cfg.Agents), t.startAgents},
	}
	for _, s := range steps {
		t0 := time.Now()
		fmt.Fprintf(cfg.Progress, "soak: starting %s\n", s.what)
		if err := s.run(ctx); err != nil {
			return nil, fmt.Errorf("topology: %s: %w", s.what, err)
		}
		fmt.Fprintf(cfg.Progress, "soak: %s ready in %s\n", s.what, time.Since(t0).Round(time.Millisecond))
	}
	return t, nil
}

// Close stops every process (SIGTERM, SIGKILL after 10 s). It is
// idempotent.
func (t *Topology) Close() {
	t.closeOnce.Do(func() {
		t.Group.Close(10 * time.Second)
		for _, a := range t.Agents {
			for _, p := range a.Proxies {
				_ = p.Close()
			}
		}
	})
}

// EtcdEndpoints are the etcd members' client URLs.
func (t *Topology) EtcdEndpoints() []string {
	var out []string
	for _, m := range t.Etcd {
		out = append(out, m.ClientURL)
	}
	return out
}

// NATSURLs are the NATS nodes' client URLs, comma-separated.
func (t *Topology) NATSURLs() string {
	var out []string
	for _, n := range t.NATS {
		out = append(out, n.ClientURL)
	}
	return strings.Join(out, ",")
}

// etcdSpec is member m's command line.
func (t *Topology) etcdSpec(m *EtcdMember, initial string) procs.Spec {
	return procs.Spec{Name: m.Name, Path: t.cfg.SoakBin, Env: t.cfg.SoakEnv, Args: []string{"etcd-member",
		"--name", m.Name, "--data-dir", filepath.Join(t.cfg.Dir, "etcd", m.Name),
		"--client-url", m.ClientURL, "--peer-url", m.PeerURL, "--initial-cluster", initial,
		"--compact-every", t.cfg.EtcdCompactEvery.String()}}
}

func (t *Topology) startEtcd(ctx context.Context) error {
	var members []string
	for _, m := range t.Etcd {
		members = append(members, m.Name+"="+m.PeerURL)
	}
	initial := strings.Join(members, ",")
	for _, m := range t.Etcd {
		p, err := t.Group.Start(t.etcdSpec(m, initial))
		if err != nil {
			return err
		}
		m.Proc = p
	}
	c, err := t.EtcdClient()
	if err != nil {
		return err
	}
	defer c.Close()
	return procs.WaitFor(ctx, nil, t.cfg.ReadyTimeout, func(ctx context.Context) error {
		for _, m := range t.Etcd {
			if !m.Proc.Running() {
				return fmt.Errorf("%s exited: see %s", m.Name, m.Proc.LogPath())
			}
		}
		_, err := c.Put(ctx, "/meridian-soak/ready", time.Now().Format(time.RFC3339Nano))
		return err
	})
}

// EtcdClient dials every member. The caller closes it.
func (t *Topology) EtcdClient() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: t.EtcdEndpoints(), DialTimeout: 2 * time.Second,
		Logger: embedetcd.ClientLogger(nil)})
}

// EtcdLeader returns the member that leads the etcd cluster now.
func (t *Topology) EtcdLeader(ctx context.Context) (*EtcdMember, error) {
	c, err := t.EtcdClient()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var last error
	for _, m := range t.Etcd {
		if !m.Proc.Running() {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := c.Status(sctx, m.ClientURL)
		cancel()
		if err != nil {
			last = err
			continue
		}
		if st.Header.MemberId == st.Leader {
			return m, nil
		}
	}
	return nil, fmt.Errorf("topology: no etcd member says it leads (last error %v)", last)
}

func (t *Topology) natsSpec(n *NATSNode) procs.Spec {
	var routes []string
	for _, o := range t.NATS {
		if o != n {
			routes = append(routes, o.RouteURL)
		}
	}
	port := n.ClientURL[strings.LastIndex(n.ClientURL, ":")+1:]
	cport := n.RouteURL[strings.LastIndex(n.RouteURL, ":")+1:]
	return procs.Spec{Name: n.Name, Path: t.cfg.SoakBin, Env: t.cfg.SoakEnv, Args: []string{"nats-node",
		"--name", n.Name, "--port", port, "--cluster-port", cport, "--routes", strings.Join(routes, ","),
		"--store-dir", filepath.Join(t.cfg.Dir, "nats", n.Name), fmt.Sprintf("--no-advertise=%t", t.cfg.AgentProxies)}}
}

func (t *Topology) startNATS(ctx context.Context) error {
	for _, n := range t.NATS {
		p, err := t.Group.Start(t.natsSpec(n))
		if err != nil {
			return err
		}
		n.Proc = p
	}
	return procs.WaitFor(ctx, nil, t.cfg.ReadyTimeout, func(ctx context.Context) error {
		for _, n := range t.NATS {
			if !n.Proc.Running() {
				return fmt.Errorf("%s exited: see %s", n.Name, n.Proc.LogPath())
			}
		}
		return jetStreamReady(ctx, t.NATSURLs())
	})
}

// jetStreamReady reports whether the cluster's JetStream answers and can
// place a stream on three nodes: a meta leader that answers may not know
// every peer yet, and a hub that then creates its R3 streams fails with
// "no suitable peers for placement".
func jetStreamReady(ctx context.Context, urls string) error {
	nc, err := nats.Connect(urls, nats.Timeout(time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		return err
	}
	const probe = "MERIDIAN_SOAK_READY"
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: probe, Subjects: []string{"meridian-soak.ready"},
		Replicas: 3, Storage: jetstream.MemoryStorage, MaxMsgs: 1}); err != nil {
		return fmt.Errorf("an R3 stream: %w", err)
	}
	return js.DeleteStream(ctx, probe)
}

func (t *Topology) hubSpec(h *Hub) procs.Spec {
	args := []string{"--hub-id", h.ID, "--data-dir", filepath.Join(t.cfg.Dir, "hubs", h.ID),
		"--grpc-addr", h.GRPC, "--http-addr", h.HTTP,
		"--etcd-endpoints", strings.Join(t.EtcdEndpoints(), ","), "--etcd-max-txn-ops", strconv.Itoa(embedetcd.DefaultMaxTxnOps),
		"--nats-url", t.NATSURLs(), "--nats-stream-replicas", "3",
		"--auth", "on", "--admin-token-file", t.TokenFile}
	if d := t.cfg.LeaderTTL; d > 0 {
		args = append(args, "--leader-ttl", d.String())
	}
	if d := t.cfg.SchedulePeriod; d > 0 {
		args = append(args, "--schedule-period", d.String())
	}
	if d := t.cfg.ClusterTimeout; d > 0 {
		args = append(args, "--cluster-timeout", d.String())
	}
	return procs.Spec{Name: h.ID, Path: t.cfg.HubBin, Args: append(args, t.cfg.HubArgs...)}
}

// startHubs starts the first hub alone, so that it alone writes the admin
// token file, then the others with the same file.
func (t *Topology) startHubs(ctx context.Context) error {
	if err := t.startHub(ctx, t.Hubs[0]); err != nil {
		return err
	}
	b, err := os.ReadFile(t.TokenFile)
	if err != nil {
		return fmt.Errorf("the admin token: %w", err)
	}
	t.Token = strings.TrimSpace(string(b))
	errs := make([]error, len(t.Hubs))
	var wg sync.WaitGroup
	for i, h := range t.Hubs[1:] {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i+1] = t.startHub(ctx, h) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (t *Topology) startHub(ctx context.Context, h *Hub) error {
	p, err := t.Group.Start(t.hubSpec(h))
	if err != nil {
		return err
	}
	h.Proc = p
	return t.WaitHub(ctx, h)
}

// WaitHub waits until h answers /readyz.
func (t *Topology) WaitHub(ctx context.Context, h *Hub) error {
	if err := procs.WaitHTTP(ctx, h.Proc, "http://"+h.HTTP+"/readyz", t.cfg.ReadyTimeout); err != nil {
		return fmt.Errorf("%s: %w", h.ID, err)
	}
	return nil
}

func (t *Topology) agentSpec(a *Agent) procs.Spec {
	urls := t.NATSURLs()
	if len(a.Proxies) > 0 {
		var us []string
		for _, p := range a.Proxies {
			us = append(us, "nats://"+p.Addr())
		}
		urls = strings.Join(us, ",")
	}
	sim := []string{"--sim-example", t.cfg.SimExample}
	if t.cfg.SimConfig != "" {
		sim = []string{"--sim-config", t.cfg.SimConfig}
	}
	return procs.Spec{Name: "agent-" + a.ClusterID, Path: t.cfg.AgentBin,
		Env: []string{"MERIDIAN_SIM_LAUNCH_JOURNAL=" + a.Journal},
		Args: append(append([]string{
			"--cluster-id", a.ClusterID, "--nats-url", urls, "--connector", "simcluster"}, sim...),
			"--time-scale", strconv.FormatFloat(t.cfg.TimeScale, 'f', -1, 64),
			"--heartbeat-interval", "1s", "--advertise-interval", "2s")}
}

func (t *Topology) startAgents(ctx context.Context) error {
	var ids []string
	jdir := filepath.Join(t.cfg.Dir, "journals")
	if err := os.MkdirAll(jdir, 0o755); err != nil {
		return err
	}
	for i := 0; i < t.cfg.Agents; i++ {
		id := fmt.Sprintf("sim-%d", i+1)
		a := &Agent{ClusterID: id, Journal: filepath.Join(jdir, id+".jsonl")}
		t.Agents = append(t.Agents, a) // before its start, so that Close closes its proxies
		if t.cfg.AgentProxies {
			for _, n := range t.NATS {
				p, err := proxy.New(strings.TrimPrefix(n.ClientURL, "nats://"))
				if err != nil {
					return err
				}
				a.Proxies = append(a.Proxies, p)
			}
		}
		p, err := t.Group.Start(t.agentSpec(a))
		if err != nil {
			return err
		}
		a.Proc = p
		ids = append(ids, a.ClusterID)
	}
	return t.WaitClusters(ctx, ids...)
}

// WaitClusters waits until a live hub reports every cluster id READY with
// capacity.
func (t *Topology) WaitClusters(ctx context.Context, ids ...string) error {
	return procs.WaitFor(ctx, nil, t.cfg.ReadyTimeout, func(ctx context.Context) error {
		for _, a := range t.Agents {
			if !a.Proc.Running() {
				return fmt.Errorf("agent %s exited: see %s", a.ClusterID, a.Proc.LogPath())
			}
		}
		h := t.LiveHub()
		if h == nil {
			return errors.New("no hub is running")
		}
		conn, err := t.Dial(h)
		if err != nil {
			return err
		}
		defer conn.Close()
		resp, err := meridianv1.NewClusterServiceClient(conn).ListClusters(ctx, &meridianv1.ListClustersRequest{})
		if err != nil {
			return err
		}
		ready := map[string]bool{}
		for _, c := range resp.GetClusters() {
			if c.GetState() == meridianv1.ClusterState_CLUSTER_STATE_READY && len(c.GetCapacity()) > 0 {
				ready[c.GetId()] = true
			}
		}
		var missing []string
		for _, id := range ids {
			if !ready[id] {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("clusters %v not READY in %s", missing, h.ID)
		}
		return nil
	})
}

// LiveHub returns a hub that runs and is not paused, or nil.
func (t *Topology) LiveHub() *Hub {
	for _, h := range t.Hubs {
		if h.Proc != nil && h.Proc.Running() && !h.Proc.Paused() {
			return h
		}
	}
	return nil
}

// Dial connects to hub h's gRPC API with the admin token. The caller
// closes the connection.
func (t *Topology) Dial(h *Hub) (*grpc.ClientConn, error) {
	return grpc.NewClient(h.GRPC, t.DialOptions()...)
}

// DialOptions are what a gRPC client of any hub needs: plaintext on
// loopback and the admin token with every call.
func (t *Topology) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), localrun.Bearer(t.Token)}
}

// Leader returns the hub that leads now, asking each running, unpaused
// hub; an error when none says it leads.
func (t *Topology) Leader(ctx context.Context) (*Hub, error) {
	var last error
	for _, h := range t.Hubs {
		if h.Proc == nil || !h.Proc.Running() || h.Proc.Paused() {
			continue
		}
		conn, err := t.Dial(h)
		if err != nil {
			return nil, err
		}
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		l, err := meridianv1.NewAdminServiceClient(conn).GetLeader(lctx, &meridianv1.GetLeaderRequest{})
		cancel()
		conn.Close()
		if err != nil {
			last = err
			continue
		}
		if l.GetIsSelf() {
			return h, nil
		}
	}
	return nil, fmt.Errorf("topology: no running hub leads (last error %v)", last)
}

// HubByID returns the hub named id, or nil.
func (t *Topology) HubByID(id string) *Hub {
	for _, h := range t.Hubs {
		if h.ID == id {
			return h
		}
	}
	return nil
}

// freePorts returns n distinct free loopback ports.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var out []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("topology: a free loopback port: %w", err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}
