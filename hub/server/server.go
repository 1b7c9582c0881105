package server

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	// Registers google.rpc.BadRequest and the other error details, so the
	// reflection service can describe the details Meridian's errors carry
	// (grpcurl then prints them instead of base64).
	_ "google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/meridian-gpu/meridian/hub/api"
	"github.com/meridian-gpu/meridian/hub/dispatch"
	"github.com/meridian-gpu/meridian/hub/leader"
	"github.com/meridian-gpu/meridian/hub/retention"
	"github.com/meridian-gpu/meridian/hub/spokeauth"
	"github.com/meridian-gpu/meridian/hub/store"
	"github.com/meridian-gpu/meridian/hub/ui"
	"github.com/meridian-gpu/meridian/internal/ctxtime"
	embedetcd "github.com/meridian-gpu/meridian/internal/embedded/etcd"
	embednats "github.com/meridian-gpu/meridian/internal/embedded/nats"
	"github.com/meridian-gpu/meridian/internal/flowwindow"
	"github.com/meridian-gpu/meridian/internal/protofast"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// ElectionPrefix is where hub replicas campaign.
const ElectionPrefix = store.Root + "/leader"

// Defaults for Config's zero fields.
const (
	DefaultGRPCAddr       = "127.0.0.1:0"
	DefaultHTTPAddr       = "127.0.0.1:0"
	DefaultLeaderTTL      = 5 * time.Second
	DefaultShutdownGrace  = 5 * time.Second
	DefaultConnectTimeout = 15 * time.Second
)

// CacheSnapshotFile is the watch cache's snapshot in the data directory.
const CacheSnapshotFile = "cache.snapshot"

// Config says how to run one hub replica.
type Config struct {
	// DataDir holds the embedded etcd (DataDir/etcd) and the embedded NATS
	// JetStream store (DataDir/nats). Required unless both EtcdEndpoints
	// and NATSURL are set.
	DataDir string
	// EtcdEndpoints of an external etcd cluster; empty means embedded.
	EtcdEndpoints []string
	// EtcdClient is TLS and a user for the external etcd (etcdclient.go);
	// the zero value connects in plaintext without one.
	EtcdClient EtcdClient
	// EtcdMaxTxnOps is the external etcd's --max-txn-ops; 0 means
	// store.DefaultMaxTxnOps (the embedded server sets its own).
	EtcdMaxTxnOps int
	// NATSURL of an external NATS server with JetStream; empty means
	// embedded.
	NATSURL string
	// NATSOptions are extra connection options for NATSURL, such as
	// natsbus.WithCredsFile and natsbus.WithTLS.
	NATSOptions []natsbus.Option
	// EmbeddedNATSPort and EmbeddedEtcdPort are the loopback client ports
	// of the embedded servers; 0 picks a free port.
	EmbeddedNATSPort, EmbeddedEtcdPort int
	// GRPCAddr and HTTPAddr are the listen addresses; empty means a free
	// loopback port.
	GRPCAddr, HTTPAddr string
	// HubID names this replica in the election; empty means
	// "<hostname>-<pid>".
	HubID string
	// SchedulePeriod is the longest gap between two scheduling cycles
	// without a trigger; 0 means the loop's default.
	SchedulePeriod time.Duration
	// ClusterTimeout is the silence after which a cluster is LOST; 0 means
	// the loop's default.
	ClusterTimeout time.Duration
	// LeaderTTL is the election lease; 0 means DefaultLeaderTTL.
	LeaderTTL time.Duration
	// MaxRequestBytes bounds gRPC messages and REST bodies; 0 means
	// api.DefaultMaxRequestBytes.
	MaxRequestBytes int
	// NoScheduler runs an API-only replica (no election, no loop).
	NoScheduler bool
	// TracerProvider traces the API, the scheduling loop and the hub's
	// NATS traffic (internal/telemetry); nil leaves tracing off.
	TracerProvider trace.TracerProvider
	// Dispatch tunes the loop; SchedulePeriod and ClusterTimeout override
	// its MaxIdle and ClusterTimeout when set.
	Dispatch dispatch.Config
	// RetentionTTL is how long the leader keeps a finished workload after
	// it ended, and RetentionPerQueue how many finished workloads it keeps
	// per queue (the newest); 0 disables each. meridian-hub's flags default
	// to retention.DefaultTTL and retention.DefaultMaxPerQueue.
	RetentionTTL      time.Duration
	RetentionPerQueue int
	// RetentionInterval is the gap between retention passes; 0 means
	// retention.DefaultInterval.
	RetentionInterval time.Duration
	// IdempotencyWindow is how long after a workload ended its idempotency
	// key still answers a retried submit, and so how long retention keeps
	// every finished workload whatever the limits above; 0 means
	// retention.IdempotencyWindow (24 h), at least MinIdempotencyWindow.
	// At high rates a day of finished workloads is more than etcd holds
	// (about 700 bytes each: 2,000/s for a day is 120 GB): shorten it.
	IdempotencyWindow time.Duration
	// Logger receives the hub's logs; nil drops them.
	Logger *slog.Logger
	// Clock is the hub's time source; nil means time.Now.
	Clock func() time.Time
	// Version is reported by GetHealth.
	Version string
	// CacheSnapshotEvery is how often the hub writes its watch cache to
	// DataDir/cache.snapshot, which a restart starts from; 0 means
	// store.DefaultSnapshotEvery, negative writes none (and a restart
	// lists every key).
	CacheSnapshotEvery time.Duration
	// UnsafeNoFsync skips fsync in the embedded etcd; for tests only.
	UnsafeNoFsync bool
	// DisableReflection turns off the gRPC server reflection service
	// (grpc.reflection.v1 and v1alpha), which is on by default so that
	// tools such as grpcurl can list and call the API without the .proto
	// files. The standard grpc.health.v1.Health service is always on.
	DisableReflection bool
	// Security says who may use the API (authentication, authorization),
	// over what transport (TLS), and where the audit log goes.
	Security Security
	// SpokeAuth, when set, gives each cluster's agent its own
	// least-privilege NATS credential (spokeauth.go); nil leaves NATS
	// authentication to NATSOptions, as before.
	SpokeAuth *SpokeAuth
	// Secrets, when set, is where the hub's secrets come from besides
	// files (Vault: cmd/meridian-hub): its metrics are served on /metrics
	// and its readiness joins /readyz.
	Secrets SecretsSource
}

// SecretsSource is a source of secrets whose state the hub reports.
type SecretsSource interface {
	// Readiness says whether the held secrets are usable and why; it is
	// called on every /readyz and health check and must not block.
	Readiness() (ready bool, detail string)
	// Gatherer serves its metrics.
	Gatherer() prometheus.Gatherer
}

// DefaultHealthInterval is how often the gRPC health service re-checks
// readiness (the same checks as /readyz).
const DefaultHealthInterval = time.Second

func (c *Config) validate() error {
	embedded := len(c.EtcdEndpoints) == 0 || c.NATSURL == ""
	if embedded && strings.TrimSpace(c.DataDir) == "" {
		return errors.New("server: Config.DataDir is required for the embedded etcd or NATS (or set both EtcdEndpoints and NATSURL)")
	}
	for i, ep := range c.EtcdEndpoints {
		if strings.TrimSpace(ep) == "" {
			return fmt.Errorf("server: Config.EtcdEndpoints[%d] is empty", i)
		}
	}
	if err := c.EtcdClient.check(c.EtcdEndpoints); err != nil {
		return err
	}
	if c.EtcdMaxTxnOps < 0 {
		return fmt.Errorf("server: Config.EtcdMaxTxnOps %d is negative", c.EtcdMaxTxnOps)
	}
	for name, p := range map[string]int{"EmbeddedNATSPort": c.EmbeddedNATSPort, "EmbeddedEtcdPort": c.EmbeddedEtcdPort} {
		if p < 0 || p > 65535 {
			return fmt.Errorf("server: Config.%s %d out of range 0..65535", name, p)
		}
	}
	if c.MaxRequestBytes < 0 {
		return fmt.Errorf("server: Config.MaxRequestBytes %d is negative", c.MaxRequestBytes)
	}
	if err := c.validateRetention(); err != nil {
		return err
	}
	if err := c.validateSpokeAuth(); err != nil {
		return err
	}
	for name, d := range map[string]time.Duration{"SchedulePeriod": c.SchedulePeriod, "ClusterTimeout": c.ClusterTimeout, "LeaderTTL": c.LeaderTTL} {
		if d < 0 {
			return fmt.Errorf("server: Config.%s %s is negative", name, d)
		}
	}
	for name, a := range map[string]string{"GRPCAddr": c.GRPCAddr, "HTTPAddr": c.HTTPAddr} {
		if a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("server: Config.%s %q: %w", name, a, err)
		}
	}
	return nil
}

// Server is one running hub replica.
type Server struct {
	cfg Config
	log *slog.Logger

	etcd    *embedetcd.Server
	nats    *embednats.Server
	cli     *clientv3.Client
	st      *store.Store
	cache   *store.Cache
	bus     *natsbus.Bus
	spoke   *spokeauth.Authority // nil without Config.SpokeAuth
	elector *leader.Elector
	loop    *dispatch.Loop
	retain  *retention.Runner // nil with NoScheduler or retention off
	svc     *api.Service
	reg     *prometheus.Registry
	natsURL string

	grpcSrv  *grpc.Server
	health   *health.Server
	grpcLis  net.Listener
	httpSrv  *http.Server
	httpLis  net.Listener
	gwConn   *grpc.ClientConn
	sec      *security
	gwCancel context.CancelFunc

	closeOnce sync.Once
	closeErr  error
}

// Addrs are the addresses a Server listens on.
type Addrs struct {
	GRPC, HTTP string
}

// New starts the dependencies and binds the listeners. See the package doc.
func New(cfg Config) (s *Server, err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.HubID == "" {
		if cfg.HubID, err = defaultHubID(cfg.DataDir); err != nil {
			return nil, err
		}
	}
	if cfg.LeaderTTL == 0 {
		cfg.LeaderTTL = DefaultLeaderTTL
	}
	if cfg.MaxRequestBytes == 0 {
		cfg.MaxRequestBytes = api.DefaultMaxRequestBytes
	}
	if cfg.GRPCAddr == "" {
		cfg.GRPCAddr = DefaultGRPCAddr
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = DefaultHTTPAddr
	}
	mode, err := cfg.securityMode()
	if err != nil {
		return nil, err
	}
	s = &Server{cfg: cfg, log: cfg.Logger.With("hub", cfg.HubID)}
	// The deferred Close uses its own copy: "return nil, err" sets s to nil.
	started := s
	defer func() {
		if err != nil {
			_ = started.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultConnectTimeout)
	defer cancel()

	if err := s.startEtcd(ctx); err != nil {
		return nil, err
	}
	if err := s.startNATS(ctx); err != nil {
		return nil, err
	}
	cacheOpts := store.CacheOptions{Logger: s.log.With("component", "cache"), SnapshotEvery: max(0, s.cfg.CacheSnapshotEvery)}
	if s.cfg.DataDir != "" && s.cfg.CacheSnapshotEvery >= 0 {
		// A restart starts from this copy and reads only what changed
		// (hub/store/warm.go): without it, restarting every hub costs a
		// full list of a day's finished work before anyone leads.
		if err := os.MkdirAll(s.cfg.DataDir, 0o700); err != nil {
			return nil, fmt.Errorf("server: data directory: %w", err)
		}
		cacheOpts.SnapshotFile = filepath.Join(s.cfg.DataDir, CacheSnapshotFile)
	}
	s.cache, err = store.NewCache(s.cli, store.Root+"/", cacheOpts)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	s.reg = prometheus.NewRegistry()
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	if !cfg.NoScheduler {
		s.elector, err = leader.New(s.cli, ElectionPrefix, cfg.HubID, cfg.LeaderTTL)
		if err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		dc := cfg.Dispatch
		if cfg.SchedulePeriod > 0 {
			dc.MaxIdle = cfg.SchedulePeriod
		}
		if cfg.ClusterTimeout > 0 {
			dc.ClusterTimeout = cfg.ClusterTimeout
		}
		// The loop's mirror tells retention which workloads finished, so
		// that a retention pass does not list the store.
		var finished *retention.Index
		if s.cfg.retentionConfig().Policy.Enabled() {
			finished = retention.NewIndex()
		}
		deps := dispatch.Deps{
			Store: s.st, Cache: s.cache, Bus: s.bus, Elector: s.elector,
			// The loop names its hub itself (it runs without a server in tests).
			Logger: cfg.Logger, Clock: cfg.Clock, Registerer: s.reg, Config: dc,
			TracerProvider: cfg.TracerProvider,
		}
		if finished != nil {
			deps.Finished = finished
		}
		if s.loop, err = dispatch.New(deps); err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		if s.retain, err = s.newRetention(finished); err != nil {
			return nil, err
		}
	}
	if s.sec, err = s.buildSecurity(mode); err != nil {
		return nil, err
	}
	if err := s.buildAPI(); err != nil {
		return nil, err
	}
	if err := s.writeAdminToken(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Server) startEtcd(ctx context.Context) error {
	maxOps := s.cfg.EtcdMaxTxnOps
	var kv etcdserverpb.KVClient // nil: the client's own connection
	endpoints := s.cfg.EtcdEndpoints
	if len(endpoints) == 0 {
		e, err := embedetcd.Start(ctx, embedetcd.Config{
			DataDir: filepath.Join(s.cfg.DataDir, "etcd"), Logger: s.log.With("component", "etcd"),
			UnsafeNoFsync: s.cfg.UnsafeNoFsync, ClientPort: s.cfg.EmbeddedEtcdPort,
		})
		if err != nil {
			return fmt.Errorf("server: embedded etcd: %w", err)
		}
		s.etcd = e
		maxOps = e.MaxTxnOps()
		// The hub talks to its own member in process: every etcd call
		// skips gRPC and HTTP/2 on both ends.
		cli, err := e.InProcessClient()
		if err != nil {
			return fmt.Errorf("server: %w", err)
		}
		if kv, err = e.InProcessKV(); err != nil {
			return fmt.Errorf("server: %w", err)
		}
		s.cli = cli
	} else {
		ecfg, err := s.cfg.EtcdClient.clientConfig(endpoints, s.log.With("component", "etcd-client"))
		if err != nil {
			return err
		}
		cli, err := clientv3.New(ecfg)
		if err != nil {
			return fmt.Errorf("server: etcd client for %v: %w", endpoints, explainEtcdError(err, ecfg))
		}
		s.cli = cli
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := cli.Get(sctx, "/meridian/health-probe", clientv3.WithCountOnly()); err != nil {
			return fmt.Errorf("server: etcd at %v is not reachable: %w", endpoints, explainEtcdError(err, ecfg))
		}
	}
	st, err := store.New(s.cli, store.Options{MaxTxnOps: maxOps, KV: kv, Logger: s.log.With("component", "store")})
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	s.st = st
	return nil
}

func (s *Server) startNATS(ctx context.Context) error {
	url := s.cfg.NATSURL
	var sec *embednats.Security
	if s.cfg.SpokeAuth != nil {
		var err error
		if sec, err = s.openSpokeAuth(ctx); err != nil {
			return err
		}
	}
	if url == "" {
		n, err := embednats.Start(embednats.Config{StoreDir: filepath.Join(s.cfg.DataDir, "nats"), Port: s.cfg.EmbeddedNATSPort, Logger: s.log.With("component", "nats"), Security: sec})
		if err != nil {
			return fmt.Errorf("server: embedded NATS: %w", err)
		}
		s.nats = n
		url = n.ClientURL()
	}
	s.natsURL = url
	opts := append([]natsbus.Option{natsbus.WithName("meridian-hub-" + s.cfg.HubID), natsbus.WithLogger(s.log.With("component", "natsbus")),
		natsbus.WithTracerProvider(s.cfg.TracerProvider)}, s.cfg.NATSOptions...)
	if s.spoke != nil {
		hubCred, err := s.spokeHubOptions(ctx, url)
		if err != nil {
			return err
		}
		opts = append(opts, hubCred...)
	}
	bus, err := natsbus.Connect(ctx, url, opts...)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	s.bus = bus
	if err := ensureStreams(ctx, s.log, streamsRetryLimit, streamsTryTimeout, bus.EnsureStreams); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	if s.spoke != nil {
		if err := s.spoke.Start(ctx, bus); err != nil {
			return fmt.Errorf("server: %w", err)
		}
	}
	return nil
}

// streamsRetryLimit bounds the wait for the NATS streams at start: a
// NATS cluster that has just formed answers before its meta leader knows
// every peer, and refuses replicated streams ("no suitable peers for
// placement") for a few seconds.
const streamsRetryLimit = 30 * time.Second

// streamsTryTimeout bounds one try at the streams.
const streamsTryTimeout = 5 * time.Second

// ensureStreams makes sure the NATS streams exist, retrying for up to
// limit, each try bounded by perTry. The streams get their own time, not
// what is left of ctx's: a NATS cluster under load, or just back from
// losing a node, can take most of the hub's connect timeout to answer one
// JetStream request, and a hub that gave up here exited (the chaos soak
// saw it). ctx's values are kept, its deadline and cancellation are not.
func ensureStreams(ctx context.Context, log *slog.Logger, limit, perTry time.Duration, ensure func(context.Context) error) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit)
	defer cancel()
	return retryStartup(sctx, log, "ensure the NATS streams", limit, func(c context.Context) error {
		tctx, cancel := context.WithTimeout(c, perTry)
		defer cancel()
		return ensure(tctx)
	})
}

// retryStartup calls op until it succeeds, limit passes or ctx ends,
// pausing 500 ms between tries; it returns op's last error.
func retryStartup(ctx context.Context, log *slog.Logger, what string, limit time.Duration, op func(context.Context) error) error {
	deadline := time.Now().Add(limit)
	for try := 1; ; try++ {
		err := op(ctx)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		log.Warn("startup step failed; retrying", "step", what, "try", try, "err", err)
		if !ctxtime.Sleep(ctx, 500*time.Millisecond) {
			return err
		}
	}
}

func (s *Server) buildAPI() error {
	var err error
	s.grpcLis, err = net.Listen("tcp", s.cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("server: listen gRPC on %s: %w", s.cfg.GRPCAddr, err)
	}
	s.httpLis, err = net.Listen("tcp", s.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("server: listen HTTP on %s: %w", s.cfg.HTTPAddr, err)
	}
	m, err := api.NewMetrics(s.reg)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	d := api.Deps{
		Guard: s.sec.guard, Tokens: s.sec.tokens, AuditLog: true,
		Metrics: m,
		Address: s.grpcLis.Addr().String(),
		Store:   s.st, Workloads: s.cache, HubID: s.cfg.HubID, Version: s.cfg.Version,
		Logger: s.log.With("component", "api"), Clock: s.cfg.Clock,
		Health:       map[string]api.HealthCheck{"nats": s.natsHealth, "cache": s.cacheHealth},
		ClassWeights: s.cfg.Dispatch.ClassWeights,
	}
	if s.spoke != nil {
		d.SpokeAuth = s.spoke
	}
	if s.loop != nil {
		d.Clusters, d.Explainer, d.QueueStatus = s.loop, s.loop, s.loop
		d.FitChecker = s.loop // reject_if_never_fits
		d.Intake = s.loop     // submits the leader's loop stores itself
		d.Elector, d.ElectionPrefix = s.elector, ElectionPrefix
		d.LeaderSince = s.loop.Leading
		d.Health["scheduler"] = s.schedulerHealth
	}
	svc, err := api.New(d)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	s.svc = svc
	s.grpcSrv = grpc.NewServer(append(append(api.ServerOptions(s.log.With("component", "api"), m, s.cfg.MaxRequestBytes), s.sec.grpcOptions()...), grpcServerTracing(s.cfg.TracerProvider)...)...)
	svc.Register(s.grpcSrv)
	// grpc.health.v1.Health: NOT_SERVING until Run sees the hub ready (the
	// /readyz checks), then it follows readiness; NOT_SERVING for good on
	// shutdown. The overall status is the empty service name; each
	// meridian.v1 service has the same status under its full name.
	s.health = health.NewServer()
	s.setHealth(healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(s.grpcSrv, s.health)
	if !s.cfg.DisableReflection {
		// Reflection follows the API's authorization: the authz table
		// asks for an authenticated principal (it describes the whole
		// API). Health stays anonymous like /readyz.
		reflection.Register(s.grpcSrv)
	}

	// The gateway calls the gRPC server over loopback, so REST requests go
	// through the same interceptors.
	// The gateway calls the gRPC server over an in-process pipe: REST
	// requests pass the same interceptors, and the guard believes what the
	// gateway forwards about the caller only on this connection.
	s.gwConn, err = grpc.NewClient("passthrough:///meridian-gateway", append([]grpc.DialOption{
		grpc.WithContextDialer(s.sec.dialPipe),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(s.cfg.MaxRequestBytes+(64<<10))),
		protofast.DialOption()},
		append(flowwindow.DialOptions(), gatewayClientTracing(s.cfg.TracerProvider)...)...)...)
	if err != nil {
		return fmt.Errorf("server: gateway client: %w", err)
	}
	gwCtx, gwCancel := context.WithCancel(context.Background())
	s.gwCancel = gwCancel
	var verify func([]*x509.Certificate) ([][]*x509.Certificate, error)
	if s.sec.tls != nil && s.cfg.Security.TLS.ClientCAFile != "" {
		verify = s.sec.tls.VerifyClient
	}
	gw := api.NewGatewayMux(api.GatewayCaller(verify))
	s.httpLis = s.sec.httpListener(s.httpLis)
	if err := api.RegisterGateway(gwCtx, gw, s.gwConn, int64(s.cfg.MaxRequestBytes)); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	// Metrics carry no tenant data, but only /healthz and /readyz are open
	// to callers without credentials (a scraper presents an API token).
	mux.Handle("GET /metrics", s.sec.guard.Authenticated("GET /metrics", s.metricsHandler()))
	// The web ops dashboard (hub/ui): static assets; it calls the API above with the user's token.
	if err := ui.Mount(mux, ui.Options{Issuers: ui.FromAuth(s.cfg.Security.OIDC), Logger: s.log.With("component", "ui")}); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	maxBody := int64(s.cfg.MaxRequestBytes)
	mux.Handle("/", restTracing(s.cfg.TracerProvider, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		gw.ServeHTTP(w, r)
	})))
	s.httpSrv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	return nil
}

func (s *Server) natsHealth(context.Context) (meridianv1.HealthStatus, string) {
	nc := s.bus.Conn()
	if st := nc.Status(); st != nats.CONNECTED {
		return meridianv1.HealthStatus_HEALTH_STATUS_NOT_SERVING, "connection " + st.String()
	}
	return meridianv1.HealthStatus_HEALTH_STATUS_SERVING, "connected to " + nc.ConnectedUrlRedacted()
}

func (s *Server) cacheHealth(context.Context) (meridianv1.HealthStatus, string) {
	select {
	case <-s.cache.Ready():
		return meridianv1.HealthStatus_HEALTH_STATUS_SERVING, fmt.Sprintf("at revision %d", s.cache.Rev())
	default:
		return meridianv1.HealthStatus_HEALTH_STATUS_NOT_SERVING, "not listed yet"
	}
}

func (s *Server) schedulerHealth(context.Context) (meridianv1.HealthStatus, string) {
	if since, ok := s.loop.Leading(); ok {
		return meridianv1.HealthStatus_HEALTH_STATUS_SERVING, "leading since " + since.UTC().Format(time.RFC3339)
	}
	return meridianv1.HealthStatus_HEALTH_STATUS_SERVING, "standby (another replica leads or the election is pending)"
}

// readyz answers 200 once etcd answers, NATS is connected and the cache
// has listed; 503 with the reason otherwise.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	problems := s.readinessProblems(r.Context())
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if len(problems) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(strings.Join(problems, "\n") + "\n"))
		return
	}
	_, _ = w.Write([]byte("ready\n"))
	if s.cfg.Secrets != nil {
		// A Vault outage with secrets still valid is ready, and said.
		_, detail := s.cfg.Secrets.Readiness()
		_, _ = w.Write([]byte(detail + "\n"))
	}
}

// setHealth sets the gRPC health status of the hub ("") and of every
// meridian.v1 service.
func (s *Server) setHealth(st healthpb.HealthCheckResponse_ServingStatus) {
	s.health.SetServingStatus("", st)
	for name := range s.grpcSrv.GetServiceInfo() {
		if strings.HasPrefix(name, "meridian.") {
			s.health.SetServingStatus(name, st)
		}
	}
}

// runHealth keeps the gRPC health service in step with readiness until ctx
// ends.
func (s *Server) runHealth(ctx context.Context) {
	t := time.NewTicker(DefaultHealthInterval)
	defer t.Stop()
	for {
		st := healthpb.HealthCheckResponse_SERVING
		if problems := s.readinessProblems(ctx); len(problems) > 0 {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		if ctx.Err() != nil {
			return
		}
		s.setHealth(st)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// readinessProblems runs the readiness checks: etcd answers, NATS is
// connected and the cache has listed. It returns one line per problem.
func (s *Server) readinessProblems(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var problems []string
	if _, err := s.cli.Get(ctx, "/meridian/health-probe", clientv3.WithCountOnly()); err != nil {
		problems = append(problems, "etcd: "+err.Error())
	}
	if st, msg := s.natsHealth(ctx); st != meridianv1.HealthStatus_HEALTH_STATUS_SERVING {
		problems = append(problems, "nats: "+msg)
	}
	if st, msg := s.cacheHealth(ctx); st != meridianv1.HealthStatus_HEALTH_STATUS_SERVING {
		problems = append(problems, "cache: "+msg)
	}
	if s.cfg.Secrets != nil {
		if ok, detail := s.cfg.Secrets.Readiness(); !ok {
			problems = append(problems, "secrets: "+detail)
		}
	}
	return problems
}

// Addrs are the actual listen addresses (ports resolved).
func (s *Server) Addrs() Addrs {
	return Addrs{GRPC: s.grpcLis.Addr().String(), HTTP: s.httpLis.Addr().String()}
}

// NATSURL is the NATS server the hub uses (the embedded one's URL when
// embedded), for agents to dial.
func (s *Server) NATSURL() string { return s.natsURL }

// EtcdEndpoints are the etcd endpoints the hub uses.
func (s *Server) EtcdEndpoints() []string {
	if s.etcd != nil {
		return s.etcd.Endpoints()
	}
	return s.cfg.EtcdEndpoints
}

// Embedded reports whether etcd and NATS run in this process.
func (s *Server) Embedded() (etcd, nats bool) { return s.etcd != nil, s.nats != nil }

// HubID is this replica's id.
func (s *Server) HubID() string { return s.cfg.HubID }

// Loop is the scheduling loop, nil with NoScheduler.
func (s *Server) Loop() *dispatch.Loop { return s.loop }

// Run serves until ctx ends. See the package doc.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 5)
	var wg sync.WaitGroup
	goRun := func(name string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil && ctx.Err() == nil {
				errc <- fmt.Errorf("server: %s: %w", name, err)
			}
		}()
	}
	cacheCtx, stopCache := context.WithCancel(context.Background())
	defer stopCache()
	var cacheWG sync.WaitGroup
	cacheWG.Add(1)
	go func() {
		defer cacheWG.Done()
		_ = s.cache.Run(cacheCtx)
	}()
	goRun("grpc", func() error { return s.grpcSrv.Serve(s.grpcLis) })
	goRun("grpc-gateway-pipe", func() error { return s.grpcSrv.Serve(s.sec.pipe) })
	goRun("http", func() error {
		if err := s.httpSrv.Serve(s.httpLis); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	if s.retain != nil {
		goRun("retention", func() error { return s.retain.Run(ctx) })
	}
	goRun("health", func() error { s.runHealth(ctx); return nil })
	loopDone := make(chan struct{})
	if s.loop != nil {
		go func() {
			defer close(loopDone)
			// natsbus.SubscribeHeartbeats flushes with the subscription's
			// context and nats.go refuses a context without a deadline, so
			// give the loop one that never fires in practice (its own I/O
			// carries per-call timeouts); cancelling ctx still stops it.
			lctx, lcancel := context.WithDeadline(ctx, time.Now().Add(100*365*24*time.Hour))
			defer lcancel()
			if err := s.loop.Run(lctx); err != nil && ctx.Err() == nil {
				errc <- fmt.Errorf("server: scheduling loop: %w", err)
			}
		}()
	} else {
		close(loopDone)
	}
	s.log.Info("hub serving", "grpc", s.Addrs().GRPC, "http", s.Addrs().HTTP, "nats", s.natsURL, "etcd", s.EtcdEndpoints())

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
		s.log.Error("hub stopping on error", "err", runErr)
	}
	cancel()
	// Health checkers see NOT_SERVING (Watch streams get it pushed) while
	// the listeners drain.
	s.health.Shutdown()
	// REST first, then gRPC with a grace period for streams, then the loop.
	sctx, scancel := context.WithTimeout(context.Background(), DefaultShutdownGrace)
	defer scancel()
	_ = s.httpSrv.Shutdown(sctx)
	stopped := make(chan struct{})
	go func() { s.grpcSrv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		s.grpcSrv.Stop()
		<-stopped
	}
	<-loopDone
	if s.elector != nil {
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = s.elector.Resign(rctx)
		rcancel()
	}
	stopCache()
	cacheWG.Wait()
	wg.Wait()
	s.log.Info("hub stopped")
	return runErr
}

// Close releases everything New started. It is idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.health != nil {
			s.health.Shutdown()
		}
		if s.grpcSrv != nil {
			s.grpcSrv.Stop()
		}
		if s.grpcLis != nil {
			_ = s.grpcLis.Close()
		}
		if s.httpSrv != nil {
			_ = s.httpSrv.Close()
		}
		if s.httpLis != nil {
			_ = s.httpLis.Close()
		}
		if s.gwCancel != nil {
			s.gwCancel()
		}
		if s.gwConn != nil {
			_ = s.gwConn.Close()
		}
		s.sec.close() // flushes the audit log to etcd: before the client closes
		if s.elector != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = s.elector.Resign(ctx)
			cancel()
		}
		if s.spoke != nil {
			s.spoke.Close()
		}
		if s.bus != nil {
			s.bus.Close()
		}
		if s.cli != nil {
			if err := s.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
				errs = append(errs, fmt.Errorf("server: close etcd client: %w", err))
			}
		}
		if s.nats != nil {
			if err := s.nats.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		if s.etcd != nil {
			if err := s.etcd.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}
