package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/meridian-gpu/meridian/hub/retention"
	"github.com/meridian-gpu/meridian/hub/server"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "meridian-hub:", err)
		os.Exit(1)
	}
}

type options struct {
	cfg       server.Config
	natsAuth  natsbus.AuthFlags
	logLevel  string
	logFormat string
	gcPercent int
	addrFile  string
}

// envOr returns the first non-empty environment variable of names, or def.
func envOr(def string, names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return def
}

func envDuration(name string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %w", name, v, err)
	}
	return d, nil
}

func envInt(name string, def int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q is not a number", name, v)
	}
	return n, nil
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("meridian-hub", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "meridian-hub runs the Meridian hub: API, leader election and scheduling loop.")
		fmt.Fprintln(stderr, "With no flags it embeds etcd and NATS under ./meridian-data and listens on loopback.")
		fmt.Fprintln(stderr, "\nUsage: meridian-hub [flags]")
		fmt.Fprintln(stderr, "\nFlags (each also read from the environment variable shown):")
		fs.PrintDefaults()
	}
	period, err := envDuration("MERIDIAN_SCHEDULE_PERIOD", time.Second)
	if err != nil {
		return nil, err
	}
	timeout, err := envDuration("MERIDIAN_CLUSTER_TIMEOUT", 15*time.Second)
	if err != nil {
		return nil, err
	}
	ttl, err := envDuration("MERIDIAN_LEADER_TTL", server.DefaultLeaderTTL)
	if err != nil {
		return nil, err
	}
	natsPort, err := envInt("MERIDIAN_EMBEDDED_NATS_PORT", 4222)
	if err != nil {
		return nil, err
	}
	etcdPort, err := envInt("MERIDIAN_EMBEDDED_ETCD_PORT", 0)
	if err != nil {
		return nil, err
	}
	maxReq, err := envInt("MERIDIAN_MAX_REQUEST_BYTES", 2<<20)
	if err != nil {
		return nil, err
	}
	retTTL, err := envDuration("MERIDIAN_RETENTION_TTL", retention.DefaultTTL)
	if err != nil {
		return nil, err
	}
	retCap, err := envInt("MERIDIAN_RETENTION_MAX_FINISHED_PER_QUEUE", retention.DefaultMaxPerQueue)
	if err != nil {
		return nil, err
	}
	idemWindow, err := envDuration("MERIDIAN_IDEMPOTENCY_WINDOW", retention.IdempotencyWindow)
	if err != nil {
		return nil, err
	}
	var endpoints string
	fs.IntVar(&o.gcPercent, "gc-percent", server.DefaultGCPercent,
		"garbage collector target: the heap may grow this many percent over live state before a collection; GOGC, when set, wins; 0 keeps Go's default")
	fs.StringVar(&o.cfg.DataDir, "data-dir", envOr("meridian-data", "MERIDIAN_HUB_DATA_DIR", "MERIDIAN_DATA_DIR"),
		"directory for the embedded etcd and NATS data (env MERIDIAN_HUB_DATA_DIR, then MERIDIAN_DATA_DIR)")
	fs.StringVar(&endpoints, "etcd-endpoints", os.Getenv("MERIDIAN_ETCD_ENDPOINTS"),
		"comma-separated external etcd endpoints, e.g. http://10.0.0.5:2379; empty runs etcd embedded (env MERIDIAN_ETCD_ENDPOINTS)")
	fs.IntVar(&o.cfg.EtcdMaxTxnOps, "etcd-max-txn-ops", 0, "the external etcd's --max-txn-ops (0 = stock 128; the embedded etcd allows 10000)")
	fs.StringVar(&o.cfg.NATSURL, "nats-url", os.Getenv("MERIDIAN_NATS_URL"),
		"external NATS URL with JetStream, e.g. nats://10.0.0.6:4222; empty runs NATS embedded (env MERIDIAN_NATS_URL)")
	o.natsAuth.Register(fs)
	fs.IntVar(&o.cfg.EmbeddedNATSPort, "embedded-nats-port", natsPort, "loopback port of the embedded NATS; 0 picks a free one (env MERIDIAN_EMBEDDED_NATS_PORT)")
	fs.IntVar(&o.cfg.EmbeddedEtcdPort, "embedded-etcd-port", etcdPort, "loopback client port of the embedded etcd; 0 picks a free one (env MERIDIAN_EMBEDDED_ETCD_PORT)")
	fs.StringVar(&o.cfg.GRPCAddr, "grpc-addr", envOr("127.0.0.1:7070", "MERIDIAN_GRPC_ADDR"), "gRPC API listen address (env MERIDIAN_GRPC_ADDR)")
	fs.StringVar(&o.cfg.HTTPAddr, "http-addr", envOr("127.0.0.1:8080", "MERIDIAN_HTTP_ADDR"), "REST API, /healthz, /readyz and /metrics listen address (env MERIDIAN_HTTP_ADDR)")
	fs.StringVar(&o.cfg.HubID, "hub-id", os.Getenv("MERIDIAN_HUB_ID"), "this replica's id in the leader election; empty means <hostname>-<pid> (env MERIDIAN_HUB_ID)")
	fs.DurationVar(&o.cfg.SchedulePeriod, "schedule-period", period, "longest gap between scheduling cycles when nothing triggers one (env MERIDIAN_SCHEDULE_PERIOD)")
	fs.DurationVar(&o.cfg.ClusterTimeout, "cluster-timeout", timeout, "silence after which a cluster is LOST (env MERIDIAN_CLUSTER_TIMEOUT)")
	fs.DurationVar(&o.cfg.LeaderTTL, "leader-ttl", ttl, "leader election lease; a dead leader is replaced after about this long (env MERIDIAN_LEADER_TTL)")
	fs.IntVar(&o.cfg.MaxRequestBytes, "max-request-bytes", maxReq, "largest gRPC request message and REST body (env MERIDIAN_MAX_REQUEST_BYTES)")
	fs.DurationVar(&o.cfg.RetentionTTL, "retention-ttl", retTTL,
		"delete a finished (SUCCEEDED, FAILED, CANCELLED) workload this long after it ended, at least the idempotency window; 0 keeps them forever (env MERIDIAN_RETENTION_TTL)")
	fs.IntVar(&o.cfg.RetentionPerQueue, "retention-max-finished-per-queue", retCap,
		"keep at most this many finished workloads per queue, deleting the oldest first but none within the idempotency window of its end; 0 means no cap (env MERIDIAN_RETENTION_MAX_FINISHED_PER_QUEUE)")
	fs.DurationVar(&o.cfg.IdempotencyWindow, "idempotency-window", idemWindow,
		"how long after a workload ended a retried submit with its idempotency key still returns it; retention keeps every finished workload this long. At least 1m; shorten it at high submit rates, where a day of finished workloads outgrows etcd (env MERIDIAN_IDEMPOTENCY_WINDOW)")
	fs.BoolVar(&o.cfg.NoScheduler, "no-scheduler", os.Getenv("MERIDIAN_NO_SCHEDULER") == "1", "serve the API only: no leader election, no scheduling loop (env MERIDIAN_NO_SCHEDULER=1)")
	fs.StringVar(&o.addrFile, "addr-file", os.Getenv("MERIDIAN_ADDR_FILE"), "write the listening addresses as JSON to this file once ready (env MERIDIAN_ADDR_FILE)")
	fs.StringVar(&o.logLevel, "log-level", envOr("info", "MERIDIAN_LOG_LEVEL"), "log level: debug, info, warn, error (env MERIDIAN_LOG_LEVEL)")
	fs.StringVar(&o.logFormat, "log-format", envOr("text", "MERIDIAN_LOG_FORMAT"), "log format: text or json (env MERIDIAN_LOG_FORMAT)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q; meridian-hub takes flags only (see -h)", fs.Arg(0))
	}
	for _, ep := range strings.Split(endpoints, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			o.cfg.EtcdEndpoints = append(o.cfg.EtcdEndpoints, ep)
		}
	}
	if o.natsAuth.Any() {
		if o.cfg.NATSURL == "" {
			return nil, errors.New("the --nats-creds, --nats-nkey, --nats-user, --nats-token-file and --nats-tls-* flags (and their MERIDIAN_NATS_* variables) need --nats-url: the embedded NATS listens on loopback without credentials")
		}
		natsOpts, err := o.natsAuth.Options(o.cfg.NATSURL)
		if err != nil {
			return nil, err
		}
		o.cfg.NATSOptions = natsOpts
	}
	for name, d := range map[string]time.Duration{"--schedule-period": o.cfg.SchedulePeriod, "--cluster-timeout": o.cfg.ClusterTimeout, "--leader-ttl": o.cfg.LeaderTTL} {
		if d <= 0 {
			return nil, fmt.Errorf("%s must be positive (got %s)", name, d)
		}
	}
	if o.cfg.IdempotencyWindow < server.MinIdempotencyWindow {
		return nil, fmt.Errorf("--idempotency-window must be at least %s (got %s)", server.MinIdempotencyWindow, o.cfg.IdempotencyWindow)
	}
	if o.cfg.RetentionTTL < 0 || (o.cfg.RetentionTTL > 0 && o.cfg.RetentionTTL < o.cfg.IdempotencyWindow) {
		return nil, fmt.Errorf("--retention-ttl must be 0 (keep finished workloads forever) or at least %s, the --idempotency-window (got %s)",
			o.cfg.IdempotencyWindow, o.cfg.RetentionTTL)
	}
	if o.cfg.RetentionPerQueue < 0 {
		return nil, fmt.Errorf("--retention-max-finished-per-queue must be 0 (no cap) or positive (got %d)", o.cfg.RetentionPerQueue)
	}
	if o.cfg.MaxRequestBytes < 4096 {
		return nil, fmt.Errorf("--max-request-bytes must be at least 4096 (got %d)", o.cfg.MaxRequestBytes)
	}
	switch o.logFormat {
	case "text", "json":
	default:
		return nil, fmt.Errorf("--log-format %q: use text or json", o.logFormat)
	}
	if _, err := parseLevel(o.logLevel); err != nil {
		return nil, err
	}
	o.cfg.Version = version
	return o, nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level %q: use debug, info, warn or error", s)
	}
	return l, nil
}

// addrInfo is what --addr-file holds and what the banner shows.
type addrInfo struct {
	HubID string   `json:"hub_id"`
	GRPC  string   `json:"grpc"`
	HTTP  string   `json:"http"`
	NATS  string   `json:"nats"`
	Etcd  []string `json:"etcd"`
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	lvl, _ := parseLevel(o.logLevel)
	hopts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler = slog.NewTextHandler(stderr, hopts)
	if o.logFormat == "json" {
		h = slog.NewJSONHandler(stderr, hopts)
	}
	o.cfg.Logger = slog.New(h)
	server.TuneGC(o.gcPercent, o.cfg.Logger)
	s, err := server.New(o.cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	a := s.Addrs()
	info := addrInfo{HubID: s.HubID(), GRPC: a.GRPC, HTTP: a.HTTP, NATS: s.NATSURL(), Etcd: s.EtcdEndpoints()}
	printBanner(stdout, info, s, o)
	if o.addrFile != "" {
		b, _ := json.MarshalIndent(info, "", "  ")
		if err := os.WriteFile(o.addrFile, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("--addr-file: %w", err)
		}
	}
	if err := s.Run(ctx); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "meridian-hub: stopped")
	return nil
}

func printBanner(w io.Writer, info addrInfo, s *server.Server, o *options) {
	etcdEmb, natsEmb := s.Embedded()
	mode := func(emb bool) string {
		if emb {
			return "embedded, data in " + o.cfg.DataDir
		}
		return "external"
	}
	fmt.Fprintf(w, "meridian-hub %s (%s) listening\n", info.HubID, version)
	fmt.Fprintf(w, "  gRPC API  %s\n", info.GRPC)
	fmt.Fprintf(w, "  REST API  http://%s/v1/workloads\n", info.HTTP)
	fmt.Fprintf(w, "  health    http://%s/healthz  http://%s/readyz\n", info.HTTP, info.HTTP)
	fmt.Fprintf(w, "  metrics   http://%s/metrics\n", info.HTTP)
	fmt.Fprintf(w, "  NATS      %s (%s)\n", info.NATS, mode(natsEmb))
	fmt.Fprintf(w, "  etcd      %s (%s)\n", strings.Join(info.Etcd, ","), mode(etcdEmb))
}
