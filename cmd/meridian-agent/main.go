package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/meridian-gpu/meridian/connectors/simcluster"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "meridian-agent:", err)
		os.Exit(2)
	}
}

type options struct {
	clusterID      string
	natsURL        string
	connector      string
	simConfig      string
	simExample     string
	timeScale      float64
	simDuration    time.Duration
	heartbeat      time.Duration
	advertise      time.Duration
	metricsAddr    string
	logLevel       string
	logFormat      string
	connectTimeout time.Duration
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("meridian-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "meridian-agent connects one cluster to the Meridian hub over NATS.")
		fmt.Fprintln(stderr, "\nUsage: meridian-agent --cluster-id ID --nats-url URL --connector simcluster --sim-config FILE [flags]")
		fmt.Fprintln(stderr, "\nFlags:")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.clusterID, "cluster-id", "", "cluster id (letters, digits, '-', '_'; at most 64); required")
	fs.StringVar(&o.natsURL, "nats-url", os.Getenv("MERIDIAN_NATS_URL"), "NATS server URL, e.g. nats://127.0.0.1:4222 (env MERIDIAN_NATS_URL); required")
	fs.StringVar(&o.connector, "connector", "simcluster", "cluster backend: simcluster, slurm or kubernetes (only simcluster is built so far)")
	fs.StringVar(&o.simConfig, "sim-config", "", "simcluster: cluster description YAML (see connectors/simcluster/examples)")
	fs.StringVar(&o.simExample, "sim-example", "", "simcluster: a built-in example cluster instead of --sim-config: "+strings.Join(simcluster.ExampleNames(), ", "))
	fs.Float64Var(&o.timeScale, "time-scale", 1, "simcluster: simulated seconds per real second (60 = one simulated minute per second)")
	fs.DurationVar(&o.simDuration, "sim-default-duration", 0, "simcluster: run time of workloads that declare none (0 = the file's defaultDuration, else 30s)")
	fs.DurationVar(&o.heartbeat, "heartbeat-interval", agent.DefaultHeartbeatInterval, "time between heartbeats")
	fs.DurationVar(&o.advertise, "advertise-interval", agent.DefaultAdvertiseInterval, "time between full capacity advertisements")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics on this address, e.g. 127.0.0.1:9464 (empty = off)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.DurationVar(&o.connectTimeout, "connect-timeout", 30*time.Second, "how long to wait for the first NATS connection")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (all options are flags; see --help)", fs.Arg(0))
	}
	if o.clusterID == "" {
		return nil, errors.New("--cluster-id is required")
	}
	if err := natsbus.ValidateClusterID(o.clusterID); err != nil {
		return nil, fmt.Errorf("--cluster-id: %w", err)
	}
	if strings.TrimSpace(o.natsURL) == "" {
		return nil, errors.New("--nats-url is required (or set MERIDIAN_NATS_URL)")
	}
	switch o.connector {
	case "simcluster":
		if (o.simConfig == "") == (o.simExample == "") {
			return nil, errors.New("give exactly one of --sim-config or --sim-example with --connector simcluster")
		}
	case "slurm", "kubernetes":
		return nil, fmt.Errorf("--connector %s: this connector is not built yet; only simcluster is available", o.connector)
	default:
		return nil, fmt.Errorf("--connector %q: want simcluster, slurm or kubernetes", o.connector)
	}
	if !(o.timeScale > 0) || o.timeScale > 1e6 {
		return nil, fmt.Errorf("--time-scale %v: must be in (0, 1000000]", o.timeScale)
	}
	if o.simDuration < 0 {
		return nil, fmt.Errorf("--sim-default-duration %s: must not be negative", o.simDuration)
	}
	if o.heartbeat <= 0 {
		return nil, fmt.Errorf("--heartbeat-interval %s: must be positive", o.heartbeat)
	}
	if o.advertise <= 0 {
		return nil, fmt.Errorf("--advertise-interval %s: must be positive", o.advertise)
	}
	if o.connectTimeout <= 0 {
		return nil, fmt.Errorf("--connect-timeout %s: must be positive", o.connectTimeout)
	}
	if o.metricsAddr != "" {
		if _, _, err := net.SplitHostPort(o.metricsAddr); err != nil {
			return nil, fmt.Errorf("--metrics-addr %q: want host:port: %w", o.metricsAddr, err)
		}
	}
	if _, err := parseLevel(o.logLevel); err != nil {
		return nil, err
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		return nil, fmt.Errorf("--log-format %q: want text or json", o.logFormat)
	}
	return o, nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
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
	log := slog.New(h).With("component", "meridian-agent")

	var cfg *simcluster.Config
	if o.simExample != "" {
		if cfg, err = simcluster.Example(o.simExample); err != nil {
			return fmt.Errorf("--sim-example: %w", err)
		}
	} else if cfg, err = simcluster.LoadConfig(o.simConfig); err != nil {
		return fmt.Errorf("--sim-config: %w", err)
	}
	clock, err := simcluster.NewScaledClock(o.timeScale)
	if err != nil {
		return fmt.Errorf("--time-scale: %w", err)
	}
	sim, err := simcluster.New(cfg, simcluster.Options{Clock: clock, Logger: log, DefaultDuration: o.simDuration})
	if err != nil {
		return err
	}
	defer sim.Close()

	cctx, cancel := context.WithTimeout(ctx, o.connectTimeout)
	bus, err := natsbus.Connect(cctx, o.natsURL, natsbus.WithName("meridian-agent "+o.clusterID), natsbus.WithLogger(log))
	cancel()
	if err != nil {
		return fmt.Errorf("--nats-url: %w", err)
	}
	defer bus.Close()

	a, err := agent.New(agent.Config{
		ClusterID: o.clusterID, Bus: bus, Connector: sim, Logger: log, Version: version,
		HeartbeatInterval: o.heartbeat, AdvertiseInterval: o.advertise,
	})
	if err != nil {
		return err
	}
	if o.metricsAddr != "" {
		ln, err := net.Listen("tcp", o.metricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", a.Metrics().Handler())
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		log.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	}
	log.Info("starting", "cluster", o.clusterID, "connector", o.connector, "nodes", len(cfg.Nodes), "gpus", cfg.TotalGPUs(), "time_scale", o.timeScale)
	return a.Run(ctx)
}
