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
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/meridian-gpu/meridian/connectors/kubernetes"
	"github.com/meridian-gpu/meridian/connectors/simcluster"
	"github.com/meridian-gpu/meridian/connectors/slurm"
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
	natsAuth       natsbus.AuthFlags
	natsOpts       []natsbus.Option // from natsAuth, files checked
	connector      string
	simConfig      string
	simExample     string
	timeScale      float64
	simDuration    time.Duration
	heartbeat      time.Duration
	advertise      time.Duration
	parallelism    int
	metricsAddr    string
	logLevel       string
	logFormat      string
	connectTimeout time.Duration

	slurmRESTURL   string
	slurmUser      string
	slurmJWTKey    string
	slurmCLI       string
	slurmBinDir    string
	slurmConf      string
	slurmPartition string
	slurmPoll      time.Duration
	slurmClasses   kvFlag
	slurmGPUMem    kvFlag
	labels         kvFlag

	kubeconfig     string
	k8sNamespace   string
	k8sRackLabel   string
	k8sModes       string
	k8sShared      int
	k8sGang        string
	k8sKueueQueue  string
	k8sKAIQueue    string
	k8sTolerations string
	k8sClasses     kvFlag
	k8sNodeSel     kvFlag
}

// kvFlag is a repeatable key=value flag.
type kvFlag map[string]string

func (f *kvFlag) String() string {
	if f == nil || *f == nil {
		return ""
	}
	keys := make([]string, 0, len(*f))
	for k := range *f {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + (*f)[k]
	}
	return strings.Join(parts, ",")
}

func (f *kvFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("want key=value, got %q", v)
	}
	if *f == nil {
		*f = kvFlag{}
	}
	(*f)[strings.TrimSpace(k)] = strings.TrimSpace(val)
	return nil
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
	o.natsAuth.Register(fs)
	fs.StringVar(&o.connector, "connector", "simcluster", "cluster backend: simcluster, slurm or kubernetes")
	fs.StringVar(&o.simConfig, "sim-config", "", "simcluster: cluster description YAML (see connectors/simcluster/examples)")
	fs.StringVar(&o.simExample, "sim-example", "", "simcluster: a built-in example cluster instead of --sim-config: "+strings.Join(simcluster.ExampleNames(), ", "))
	fs.Float64Var(&o.timeScale, "time-scale", 1, "simcluster: simulated seconds per real second (60 = one simulated minute per second)")
	fs.DurationVar(&o.simDuration, "sim-default-duration", 0, "simcluster: run time of workloads that declare none (0 = the file's defaultDuration, else 30s)")
	fs.DurationVar(&o.heartbeat, "heartbeat-interval", agent.DefaultHeartbeatInterval, "time between heartbeats")
	fs.DurationVar(&o.advertise, "advertise-interval", agent.DefaultAdvertiseInterval, "time between full capacity advertisements")
	fs.IntVar(&o.parallelism, "launch-parallelism", agent.DefaultLaunchParallelism, "dispatches and cancels handled at the same time (never two for one dispatch); 1 = one at a time")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics on this address, e.g. 127.0.0.1:9464 (empty = off)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.DurationVar(&o.connectTimeout, "connect-timeout", 30*time.Second, "how long to wait for the first NATS connection")
	fs.Var(&o.labels, "label", "cluster label key=value, matched by workloads' cluster selectors (repeatable; slurm and kubernetes, simcluster labels come from its file)")
	fs.StringVar(&o.slurmRESTURL, "slurm-rest-url", os.Getenv("MERIDIAN_SLURM_REST_URL"), "slurm: slurmrestd base URL, e.g. http://127.0.0.1:6820 (env MERIDIAN_SLURM_REST_URL); empty = Slurm commands only. A fixed token is read from env MERIDIAN_SLURM_TOKEN")
	fs.StringVar(&o.slurmUser, "slurm-user", "", "slurm: user jobs run as and the JWT user (default root when root, else $USER)")
	fs.StringVar(&o.slurmJWTKey, "slurm-jwt-key-file", "", "slurm: slurmctld's jwt_key file, to mint slurmrestd tokens")
	fs.StringVar(&o.slurmCLI, "slurm-cli", "auto", "slurm: use the Slurm commands (sbatch, squeue, ...): auto, on or off")
	fs.StringVar(&o.slurmBinDir, "slurm-bin-dir", "", "slurm: directory of the Slurm commands (default: PATH)")
	fs.StringVar(&o.slurmConf, "slurm-conf", "", "slurm: slurm.conf path passed as SLURM_CONF to the commands")
	fs.StringVar(&o.slurmPartition, "slurm-partition", "", "slurm: partition to submit to and advertise (default: all nodes)")
	fs.DurationVar(&o.slurmPoll, "slurm-poll-interval", 2*time.Second, "slurm: time between job state polls")
	fs.Var(&o.slurmClasses, "slurm-class", "slurm: GRES type to accelerator class, e.g. h100=nvidia-h100-80gb (repeatable)")
	fs.Var(&o.slurmGPUMem, "slurm-gpu-memory", "slurm: GRES type to GPU memory in MiB, e.g. h100=81920 (repeatable)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubernetes: kubeconfig file (env KUBECONFIG); empty = in-cluster service account")
	fs.StringVar(&o.k8sNamespace, "k8s-namespace", "default", "kubernetes: namespace the Jobs are created in")
	fs.StringVar(&o.k8sRackLabel, "k8s-rack-label", kubernetes.DefaultRackLabel, "kubernetes: node label naming the rack")
	fs.StringVar(&o.k8sModes, "k8s-fractional-modes", "", "kubernetes: comma-separated fractional modes the cluster's plugins support, in order of preference: hami, kai, mig, time-slicing")
	fs.IntVar(&o.k8sShared, "k8s-shared-replicas", 1, "kubernetes: nvidia.com/gpu units per physical GPU (time-slicing replicas or HAMi deviceSplitCount)")
	fs.StringVar(&o.k8sGang, "k8s-gang", kubernetes.GangNone, "kubernetes: gang mechanism: none, coscheduling (scheduler-plugins PodGroup) or kueue")
	fs.StringVar(&o.k8sKueueQueue, "k8s-kueue-queue", "", "kubernetes: Kueue LocalQueue name (with --k8s-gang kueue)")
	fs.StringVar(&o.k8sKAIQueue, "k8s-kai-queue", "", "kubernetes: KAI queue label of fractional pods in kai mode")
	fs.StringVar(&o.k8sTolerations, "k8s-tolerate", "", "kubernetes: comma-separated taint keys every pod tolerates (NoSchedule, operator Exists)")
	fs.Var(&o.k8sClasses, "k8s-class", "kubernetes: GFD product to accelerator class, e.g. NVIDIA-H100-80GB-HBM3=nvidia-h100-80gb (repeatable)")
	fs.Var(&o.k8sNodeSel, "k8s-node-selector", "kubernetes: only advertise nodes with this label key=value (repeatable)")
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
	natsOpts, err := o.natsAuth.Options(o.natsURL)
	if err != nil {
		return nil, err
	}
	o.natsOpts = natsOpts
	switch o.connector {
	case "simcluster":
		if (o.simConfig == "") == (o.simExample == "") {
			return nil, errors.New("give exactly one of --sim-config or --sim-example with --connector simcluster")
		}
	case "slurm":
		if o.simConfig != "" || o.simExample != "" {
			return nil, errors.New("--sim-config and --sim-example only apply to --connector simcluster")
		}
		switch o.slurmCLI {
		case "auto", "on", "off":
		default:
			return nil, fmt.Errorf("--slurm-cli %q: want auto, on or off", o.slurmCLI)
		}
		if o.slurmRESTURL == "" && o.slurmCLI == "off" {
			return nil, errors.New("--connector slurm needs --slurm-rest-url or the Slurm commands (--slurm-cli auto or on)")
		}
		if o.slurmRESTURL != "" && o.slurmJWTKey == "" && os.Getenv("MERIDIAN_SLURM_TOKEN") == "" {
			return nil, errors.New("--slurm-rest-url needs --slurm-jwt-key-file or a token in env MERIDIAN_SLURM_TOKEN")
		}
		if o.slurmPoll <= 0 {
			return nil, fmt.Errorf("--slurm-poll-interval %s: must be positive", o.slurmPoll)
		}
		for k, v := range o.slurmGPUMem {
			if n, err := strconv.ParseInt(v, 10, 64); err != nil || n <= 0 {
				return nil, fmt.Errorf("--slurm-gpu-memory %s=%s: want a positive number of MiB", k, v)
			}
		}
	case "kubernetes":
		if o.simConfig != "" || o.simExample != "" {
			return nil, errors.New("--sim-config and --sim-example only apply to --connector simcluster")
		}
		if err := k8sConfig(o, nil).Validate(); err != nil {
			return nil, fmt.Errorf("--connector kubernetes: %w", err)
		}
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
	if o.parallelism < 1 || o.parallelism > agent.MaxLaunchParallelism {
		return nil, fmt.Errorf("--launch-parallelism %d: must be between 1 and %d", o.parallelism, agent.MaxLaunchParallelism)
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

	conn, closeConn, err := buildConnector(o, log)
	if err != nil {
		return err
	}
	defer closeConn()

	cctx, cancel := context.WithTimeout(ctx, o.connectTimeout)
	nopts := append([]natsbus.Option{natsbus.WithName("meridian-agent " + o.clusterID), natsbus.WithLogger(log)}, o.natsOpts...)
	bus, err := natsbus.Connect(cctx, o.natsURL, nopts...)
	cancel()
	if err != nil {
		return fmt.Errorf("--nats-url: %w", err)
	}
	defer bus.Close()

	a, err := agent.New(agent.Config{
		ClusterID: o.clusterID, Bus: bus, Connector: conn, Logger: log, Version: version,
		HeartbeatInterval: o.heartbeat, AdvertiseInterval: o.advertise, LaunchParallelism: o.parallelism,
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
	log.Info("starting", "cluster", o.clusterID, "connector", o.connector)
	return a.Run(ctx)
}

// buildConnector turns the checked flags into a connector and its closer.
func buildConnector(o *options, log *slog.Logger) (agent.Connector, func(), error) {
	switch o.connector {
	case "kubernetes":
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := kubernetes.New(ctx, k8sConfig(o, log))
		if err != nil {
			return nil, nil, fmt.Errorf("--connector kubernetes: %w", err)
		}
		return c, c.Close, nil
	case "slurm":
		cfg := slurm.Config{
			RESTURL: o.slurmRESTURL, User: o.slurmUser, Token: os.Getenv("MERIDIAN_SLURM_TOKEN"), JWTKeyFile: o.slurmJWTKey,
			BinDir: o.slurmBinDir, SlurmConf: o.slurmConf, Partition: o.slurmPartition, ClusterID: o.clusterID,
			Labels: o.labels, Classes: o.slurmClasses, PollInterval: o.slurmPoll, Logger: log,
		}
		if o.slurmCLI != "auto" {
			on := o.slurmCLI == "on"
			cfg.CLI = &on
		}
		if len(o.slurmGPUMem) > 0 {
			cfg.GPUMemoryMiB = map[string]int64{}
			for k, v := range o.slurmGPUMem {
				n, _ := strconv.ParseInt(v, 10, 64) // checked in parseFlags
				cfg.GPUMemoryMiB[k] = n
			}
		}
		c, err := slurm.New(cfg)
		if err != nil {
			return nil, nil, fmt.Errorf("--connector slurm: %w", err)
		}
		log.Info("slurm connector ready", "rest_url", o.slurmRESTURL, "cli", o.slurmCLI, "partition", o.slurmPartition)
		return c, c.Close, nil
	default:
		var cfg *simcluster.Config
		var err error
		if o.simExample != "" {
			if cfg, err = simcluster.Example(o.simExample); err != nil {
				return nil, nil, fmt.Errorf("--sim-example: %w", err)
			}
		} else if cfg, err = simcluster.LoadConfig(o.simConfig); err != nil {
			return nil, nil, fmt.Errorf("--sim-config: %w", err)
		}
		clock, err := simcluster.NewScaledClock(o.timeScale)
		if err != nil {
			return nil, nil, fmt.Errorf("--time-scale: %w", err)
		}
		sim, err := simcluster.New(cfg, simcluster.Options{Clock: clock, Logger: log, DefaultDuration: o.simDuration})
		if err != nil {
			return nil, nil, err
		}
		log.Info("simulated cluster ready", "nodes", len(cfg.Nodes), "gpus", cfg.TotalGPUs(), "time_scale", o.timeScale)
		return sim, sim.Close, nil
	}
}

// k8sConfig turns the kubernetes flags into the connector's config.
func k8sConfig(o *options, log *slog.Logger) kubernetes.Config {
	cfg := kubernetes.Config{
		Kubeconfig: o.kubeconfig, Namespace: o.k8sNamespace, ClusterID: o.clusterID, Labels: o.labels,
		RackLabel: o.k8sRackLabel, NodeSelector: o.k8sNodeSel, SharedReplicas: o.k8sShared,
		Gang: o.k8sGang, KueueQueue: o.k8sKueueQueue, KAIQueue: o.k8sKAIQueue, Classes: o.k8sClasses, Logger: log,
	}
	for _, m := range strings.Split(o.k8sModes, ",") {
		if m = strings.TrimSpace(m); m != "" {
			cfg.FractionalModes = append(cfg.FractionalModes, m)
		}
	}
	for _, k := range strings.Split(o.k8sTolerations, ",") {
		if k = strings.TrimSpace(k); k != "" {
			cfg.Tolerations = append(cfg.Tolerations, corev1.Toleration{Key: k, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
		}
	}
	return cfg
}
