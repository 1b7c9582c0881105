package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter"
	"go.uber.org/zap/zapcore"
)

// DefaultMaxTxnOps is the number of operations one transaction may carry on
// the embedded server. Stock etcd allows 128 (--max-txn-ops); the hub commits
// a whole plan atomically and never splits it, so the embedded server allows
// more. A production etcd must be started with a matching --max-txn-ops.
const DefaultMaxTxnOps = 10000

// DefaultStartTimeout bounds how long Start waits for the member to be ready.
const DefaultStartTimeout = 30 * time.Second

// Config says how to start the embedded etcd member.
type Config struct {
	// DataDir holds the member's WAL and snapshots. Required. Starting again
	// on the same directory recovers everything committed before.
	DataDir string
	// Name is the member name; empty means "meridian".
	Name string
	// ClientPort and PeerPort are loopback ports; 0 picks a free port.
	ClientPort, PeerPort int
	// Logger receives etcd's error-level logs; nil drops them.
	Logger *slog.Logger
	// MaxTxnOps caps operations per transaction; 0 means DefaultMaxTxnOps.
	MaxTxnOps int
	// StartTimeout bounds the wait for readiness; 0 means DefaultStartTimeout.
	StartTimeout time.Duration
	// UnsafeNoFsync skips fsync. Only for throwaway test data: a machine crash
	// loses recent writes.
	UnsafeNoFsync bool
	// CompactEvery drops history older than this, in steps of a fifth of
	// it (compactor.go), so the data dir does not grow with every
	// write a long-running hub makes. 0 means DefaultCompactEvery; a
	// negative value keeps all history. Watchers that fall further behind
	// than this must list again, which the hub's cache does by itself.
	CompactEvery time.Duration
	// Cluster, when set, makes this process one member of a multi-member
	// cluster (one member per process, as production runs etcd) instead
	// of a cluster of its own. Nil: a single member, as before.
	Cluster *Cluster
}

// Cluster is this member's place in a multi-member cluster on loopback.
// Config.Name must be one of InitialCluster's names, and Config.PeerPort
// the port of its URL there; both ports must be given (not 0).
type Cluster struct {
	// InitialCluster lists every member as name=peerURL, comma-separated,
	// e.g. "m1=http://127.0.0.1:2380,m2=http://127.0.0.1:2381". Every
	// peer URL is on 127.0.0.1.
	InitialCluster string
	// State is "new" when the cluster is being formed, "existing" when
	// the member joins a running one. Empty means "new". A member whose
	// data dir already holds a WAL ignores both and rejoins as it was.
	State string
	// Token keeps separate clusters apart; empty means "meridian-cluster".
	Token string
	// HeartbeatInterval and ElectionTimeout are raft's; 0 means 100 ms
	// and 1 s (etcd's defaults), which separate processes on a busy
	// machine need rather than the single member's 10 ms and 100 ms.
	HeartbeatInterval, ElectionTimeout time.Duration
}

// validate checks the cluster against the member's name and peer port.
func (c *Cluster) validate(name string, clientPort, peerPort int) error {
	if c == nil {
		return nil
	}
	if clientPort == 0 || peerPort == 0 {
		return errors.New("embedetcd: a cluster member needs fixed ports: Config.ClientPort and Config.PeerPort must not be 0")
	}
	switch c.State {
	case "", embed.ClusterStateFlagNew, embed.ClusterStateFlagExisting:
	default:
		return fmt.Errorf("embedetcd: Cluster.State %q: want %q or %q", c.State, embed.ClusterStateFlagNew, embed.ClusterStateFlagExisting)
	}
	if c.HeartbeatInterval < 0 || c.ElectionTimeout < 0 || (c.ElectionTimeout > 0 && c.ElectionTimeout < 5*c.heartbeat()) {
		return fmt.Errorf("embedetcd: Cluster.ElectionTimeout %s must be at least 5 x HeartbeatInterval %s", c.ElectionTimeout, c.heartbeat())
	}
	self := false
	for _, part := range strings.Split(c.InitialCluster, ",") {
		n, raw, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || n == "" {
			return fmt.Errorf("embedetcd: Cluster.InitialCluster: %q is not name=http://127.0.0.1:port", part)
		}
		u, err := url.Parse(raw)
		if err != nil || u.Scheme != "http" || u.Hostname() != "127.0.0.1" || u.Port() == "" {
			return fmt.Errorf("embedetcd: Cluster.InitialCluster: member %s: %q is not http://127.0.0.1:port (members listen on loopback only)", n, raw)
		}
		if n == name {
			self = true
			if u.Port() != strconv.Itoa(peerPort) {
				return fmt.Errorf("embedetcd: Cluster.InitialCluster gives member %s the peer URL %s, but Config.PeerPort is %d", n, raw, peerPort)
			}
		}
	}
	if !self {
		return fmt.Errorf("embedetcd: Cluster.InitialCluster %q does not name this member %q", c.InitialCluster, name)
	}
	return nil
}

func (c *Cluster) heartbeat() time.Duration {
	if c.HeartbeatInterval > 0 {
		return c.HeartbeatInterval
	}
	return 100 * time.Millisecond
}

func (c *Cluster) election() time.Duration {
	if c.ElectionTimeout > 0 {
		return c.ElectionTimeout
	}
	return time.Second
}

// DefaultCompactEvery is the history an embedded member keeps. Every
// write keeps its old value until compaction: at 2,000 workloads/s the
// database grows by about 5 MB/s, so ten minutes of history (the default
// before) filled etcd's 2 GiB quota in under seven, and the member then
// refuses every write. History also lives in etcd's in-memory index, a
// revision per write and the key of every deleted one, which every
// garbage collection of the hub's process marks: at 2,000/s two minutes
// of it were about half the live heap. One minute is still ample for the
// hub's own watch, which only needs to bridge short reconnects; a watch
// that needs older history relists (hub/store) or is told to (the Watch
// API's since_revision).
const DefaultCompactEvery = time.Minute

// compactEvery is the history the member keeps; 0 keeps it all.
func (c Config) compactEvery() time.Duration {
	switch {
	case c.CompactEvery == 0:
		return DefaultCompactEvery
	case c.CompactEvery < 0:
		return 0
	}
	return c.CompactEvery
}

// QuotaBackendBytes is the embedded member's database size limit: etcd's
// largest suggested size rather than its 2 GiB default, so that history
// and stored workloads have room at high rates (see DefaultCompactEvery).
const QuotaBackendBytes = 8 << 30

// Server is a running embedded etcd member.
type Server struct {
	cfg        Config
	clientPort int
	peerPort   int
	log        *slog.Logger

	mu      sync.Mutex
	etcd    *embed.Etcd
	closed  bool
	started time.Duration
}

// Start validates cfg, starts the member and waits until it serves clients.
// It fails with a clear error when the data dir is missing or unusable, when
// a port is bad, or when the member is not ready within the start timeout.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if strings.TrimSpace(cfg.DataDir) == "" {
		return nil, errors.New("embedetcd: Config.DataDir is required")
	}
	if cfg.ClientPort < 0 || cfg.ClientPort > 65535 {
		return nil, fmt.Errorf("embedetcd: Config.ClientPort %d out of range 0..65535", cfg.ClientPort)
	}
	if cfg.PeerPort < 0 || cfg.PeerPort > 65535 {
		return nil, fmt.Errorf("embedetcd: Config.PeerPort %d out of range 0..65535", cfg.PeerPort)
	}
	if cfg.ClientPort != 0 && cfg.ClientPort == cfg.PeerPort {
		return nil, fmt.Errorf("embedetcd: Config.ClientPort and Config.PeerPort are both %d", cfg.ClientPort)
	}
	if cfg.MaxTxnOps < 0 {
		return nil, fmt.Errorf("embedetcd: Config.MaxTxnOps %d is negative", cfg.MaxTxnOps)
	}
	if cfg.Name == "" {
		cfg.Name = "meridian"
	}
	if err := cfg.Cluster.validate(cfg.Name, cfg.ClientPort, cfg.PeerPort); err != nil {
		return nil, err
	}
	if cfg.MaxTxnOps == 0 {
		cfg.MaxTxnOps = DefaultMaxTxnOps
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("embedetcd: Config.DataDir %q: %w", cfg.DataDir, err)
	}
	s := &Server{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	// A free port found by listening on :0 can be taken by someone else
	// before etcd binds it; retry a few times in that case.
	var lastErr error
	for attempt := 0; attempt < 4; attempt++ {
		cp, pp, err := pickPorts(cfg.ClientPort, cfg.PeerPort)
		if err != nil {
			return nil, err
		}
		s.clientPort, s.peerPort = cp, pp
		lastErr = s.start(ctx)
		if lastErr == nil {
			return s, nil
		}
		if !isAddrInUse(lastErr) || (cfg.ClientPort != 0 && cfg.PeerPort != 0) {
			break
		}
	}
	return nil, lastErr
}

// Raft log bounds of the embedded member (see start).
const (
	snapshotCount   = 500
	snapshotCatchUp = 100
)

// compactionBatchLimit is how many revisions one step of a compaction
// deletes from the backend before it commits (etcd's default is 1,000).
// Each step is a backend commit with its own fsync: at 2,000 workloads/s
// the hub makes some 15,000 revisions a second, so etcd's default added
// 15 commits a second to the backend's own 10. A step of 10,000 holds the
// backend's lock a few milliseconds longer and makes a tenth of the
// commits.
const compactionBatchLimit = 10_000

func (s *Server) start(ctx context.Context) error {
	t0 := time.Now()
	ec := embed.NewConfig()
	ec.Name = s.cfg.Name
	ec.Dir = s.cfg.DataDir
	ec.TickMs = 10
	ec.ElectionMs = 100
	ec.MaxTxnOps = uint(s.cfg.MaxTxnOps)
	ec.UnsafeNoFsync = s.cfg.UnsafeNoFsync
	// The member keeps its raft log in memory from one snapshot to the
	// next. A single embedded member has no follower to catch up, so a
	// short log is enough; the stock 10,000 entries of batched hub
	// writes held ~70 MB that every garbage collection walked, and 2,000
	// still held 146 MB at 2,000 workloads/s (each entry is a group
	// commit of many submits). A snapshot writes only the small v2
	// store and trims the log; the data itself stays in the backend.
	if s.cfg.Cluster == nil {
		ec.SnapshotCount, ec.SnapshotCatchUpEntries = snapshotCount, snapshotCatchUp
	}
	ec.QuotaBackendBytes = QuotaBackendBytes
	// History is compacted by runCompactor (compactor.go), not by etcd's
	// periodic compactor, which keeps up to twice CompactEvery.
	ec.AutoCompactionMode, ec.AutoCompactionRetention = embed.CompactorModePeriodic, "0"
	ec.CompactionBatchLimit = compactionBatchLimit
	ec.EnableGRPCGateway = false
	ec.Metrics = "basic"
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(newZapLogger(s.cfg.Logger, zapcore.ErrorLevel))
	cu := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.clientPort))}
	pu := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.peerPort))}
	ec.ListenClientUrls = []url.URL{cu}
	ec.AdvertiseClientUrls = []url.URL{cu}
	ec.ListenPeerUrls = []url.URL{pu}
	ec.AdvertisePeerUrls = []url.URL{pu}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	ec.InitialClusterToken = "meridian-embedded"
	if c := s.cfg.Cluster; c != nil {
		// Members of a real cluster have followers to catch up: they
		// keep etcd's own raft log bounds (above) and slower ticks.
		ec.TickMs, ec.ElectionMs = uint(c.heartbeat().Milliseconds()), uint(c.election().Milliseconds())
		ec.InitialCluster = c.InitialCluster
		ec.ClusterState = embed.ClusterStateFlagNew
		if c.State != "" {
			ec.ClusterState = c.State
		}
		ec.InitialClusterToken = "meridian-cluster"
		if c.Token != "" {
			ec.InitialClusterToken = c.Token
		}
	}

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return fmt.Errorf("embedetcd: start member %q in %q: %w", s.cfg.Name, s.cfg.DataDir, err)
	}
	timer := time.NewTimer(s.cfg.StartTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("embedetcd: member %q failed while starting: %w", s.cfg.Name, err)
	case <-timer.C:
		e.Server.Stop()
		e.Close()
		return fmt.Errorf("embedetcd: member %q not ready after %s", s.cfg.Name, s.cfg.StartTimeout)
	case <-ctx.Done():
		e.Server.Stop()
		e.Close()
		return fmt.Errorf("embedetcd: waiting for member %q: %w", s.cfg.Name, ctx.Err())
	}
	s.mu.Lock()
	s.etcd = e
	s.closed = false
	s.started = time.Since(t0)
	s.mu.Unlock()
	if keep := s.cfg.compactEvery(); keep > 0 {
		go runCompactor(e, keep)
	}
	s.log.Debug("embedded etcd ready", "endpoint", cu.String(), "data_dir", s.cfg.DataDir, "startup", s.started)
	return nil
}

// Endpoints returns the client URLs, e.g. ["http://127.0.0.1:23791"].
func (s *Server) Endpoints() []string {
	return []string{"http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.clientPort))}
}

// StartupTime is how long the last (re)start took until the member was ready.
func (s *Server) StartupTime() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

// MaxTxnOps is the per-transaction operation limit the member enforces.
func (s *Server) MaxTxnOps() int { return s.cfg.MaxTxnOps }

// Client dials a new client to this member. The caller closes it. The client
// logs nothing (its zap logger is routed like the server's).
func (s *Server) Client(ctx context.Context) (*clientv3.Client, error) {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   s.Endpoints(),
		DialTimeout: 5 * time.Second,
		Context:     context.WithoutCancel(ctx),
		Logger:      newZapLogger(s.cfg.Logger, zapcore.ErrorLevel),
	})
	if err != nil {
		return nil, fmt.Errorf("embedetcd: dial %v: %w", s.Endpoints(), err)
	}
	return c, nil
}

// InProcessClient returns a client that calls this member's server
// functions directly instead of going through gRPC over a socket: no
// marshalling, no HTTP/2 framing, for a process that embeds its own store.
// It is bound to the member as it runs now, so it does not survive Restart
// (use Client for that). The caller closes it.
func (s *Server) InProcessClient() (*clientv3.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.etcd == nil || s.closed {
		return nil, errors.New("embedetcd: member is not running")
	}
	return v3client.New(s.etcd.Server), nil
}

// InProcessKV is the member's KV API called in process, as
// InProcessClient's KV calls it, for callers that build their own
// requests (store.Options.KV). It fails when the member is not running.
func (s *Server) InProcessKV() (pb.KVClient, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.etcd == nil || s.closed {
		return nil, errors.New("embedetcd: member is not running")
	}
	return adapter.KvServerToKvClient(v3rpc.NewQuotaKVServer(s.etcd.Server)), nil
}

// Restart stops the member and starts it again on the same ports and data
// dir, as a process restart would. Clients reconnect on their own.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.Close(); err != nil {
		return err
	}
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		if err = s.start(ctx); err == nil || !isAddrInUse(err) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// Close stops the member and releases its ports. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	e := s.etcd
	s.etcd = nil
	already := s.closed
	s.closed = true
	s.mu.Unlock()
	if already || e == nil {
		return nil
	}
	e.Close()
	return nil
}

func pickPorts(client, peer int) (int, int, error) {
	var err error
	if client == 0 {
		if client, err = freePort(peer); err != nil {
			return 0, 0, err
		}
	}
	if peer == 0 {
		if peer, err = freePort(client); err != nil {
			return 0, 0, err
		}
	}
	return client, peer, nil
}

func freePort(avoid int) (int, error) {
	for i := 0; i < 10; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("embedetcd: find a free loopback port: %w", err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if p != avoid {
			return p, nil
		}
	}
	return 0, errors.New("embedetcd: no free loopback port found")
}

func isAddrInUse(err error) bool {
	return err != nil && strings.Contains(err.Error(), "address already in use")
}

// StartTemp starts a throwaway member, fsync off, in a new temporary
// directory named after prefix: what a test binary's TestMain shares
// between its tests. stop closes the member and removes the directory.
func StartTemp(prefix string) (s *Server, stop func(), err error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, nil, fmt.Errorf("embedetcd: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err = Start(ctx, Config{DataDir: dir, UnsafeNoFsync: true})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	return s, func() { _ = s.Close(); _ = os.RemoveAll(dir) }, nil
}
