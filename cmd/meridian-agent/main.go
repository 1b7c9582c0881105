package main

import (
	"context"
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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/meridian-gpu/meridian/connectors/simcluster"
	cc "github.com/meridian-gpu/meridian/internal/componentconfig"
	"github.com/meridian-gpu/meridian/internal/telemetry"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
	agentconfig "github.com/meridian-gpu/meridian/spoke-agent/config"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		cc.PrintError(os.Stderr, "meridian-agent", err)
		os.Exit(2)
	}
}

// run executes the meridian-agent command line: serve, or a config command.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	cmd := newCommand(os.Stdout, stderr, serve)
	cmd.SetArgs(append([]string{}, args...)) // never nil: cobra would read os.Args
	return cmd.ExecuteContext(ctx)
}

// options are a loaded configuration plus the NATS options built from it
// (their files checked).
type options struct {
	conf     *agentconfig.AgentConfiguration
	natsOpts []natsbus.Option
}

// serveFunc is what the root command does with valid options: serve in
// main, record them in tests.
type serveFunc func(ctx context.Context, o *options, stderr io.Writer) error

// newCommand builds the meridian-agent command tree:
//
//	meridian-agent [flags]                  connect the cluster and serve
//	meridian-agent --print-config [flags]   print the effective configuration
//	meridian-agent config validate [flags]  check a configuration and exit
//	meridian-agent config print [flags]     same as --print-config
func newCommand(stdout, stderr io.Writer, serve serveFunc) *cobra.Command {
	s := agentconfig.NewSchema()
	loader := cc.NewLoader(s)
	var printConfig bool
	root := &cobra.Command{
		Use:   "meridian-agent --cluster-id ID --nats-url URL --connector simcluster --sim-config FILE [flags]",
		Short: "Connect one cluster to the Meridian hub over NATS",
		Long: `meridian-agent connects one cluster to the Meridian hub over NATS.

Settings come from the defaults, then the --config file (an ` + agentconfig.Kind + `),
then the environment variables shown, then the flags given: each layer wins
over the one before. See examples/config/agent.yaml and docs/agent.md.`,
		Args:          noArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := loader.Load()
			if err != nil {
				return err
			}
			if printConfig {
				return s.Print(stdout, c)
			}
			o, err := newOptions(c)
			if err != nil {
				return err
			}
			return serve(cmd.Context(), o, stderr)
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetOut(stdout)
	root.SetErr(stderr)
	loader.AddFlags(root.PersistentFlags())
	if f := root.PersistentFlags().Lookup("sim-example"); f != nil {
		f.Usage += "; one of " + strings.Join(simcluster.ExampleNames(), ", ")
	}
	root.Flags().BoolVar(&printConfig, "print-config", false, "print the effective configuration as YAML (secrets redacted) and exit")
	root.AddCommand(cc.Command(loader, stdout))
	return root
}

func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected argument %q (all options are flags, besides the config command; see --help)", args[0])
	}
	return nil
}

// newOptions checks the NATS credential and TLS files and builds the
// connection options.
func newOptions(c *agentconfig.AgentConfiguration) (*options, error) {
	n := c.NATS
	// natsbus reads the password and the token from the environment
	// itself, the only place a secret may come from.
	flags := &natsbus.AuthFlags{
		CredsFile: n.CredsFile, NKeyFile: n.NKeyFile, User: n.User, PasswordFile: n.PasswordFile, TokenFile: n.TokenFile,
		TLSCA: n.TLS.CAFile, TLSCert: n.TLS.CertFile, TLSKey: n.TLS.KeyFile,
	}
	if c.Vault.Addr != "" && c.Vault.PKIRole != "" {
		// TLS comes with the client certificate from Vault (serve).
		flags.TLSCA = ""
	}
	natsOpts, err := flags.Options(n.URL)
	if err != nil {
		return nil, err
	}
	o := &options{conf: c, natsOpts: natsOpts}
	if c.Connector == agentconfig.ConnectorKubernetes {
		// The connector's own check, without connecting; the config's
		// validation covers the same rules, this keeps the two honest.
		if err := k8sConfig(o, nil).Validate(); err != nil {
			return nil, fmt.Errorf("--connector kubernetes: %w", err)
		}
	}
	return o, nil
}

// serve connects the cluster and runs the agent until ctx ends.
func serve(ctx context.Context, o *options, stderr io.Writer) error {
	c := o.conf
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(c.Logging.Level)) // validated
	hopts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler = slog.NewTextHandler(stderr, hopts)
	if c.Logging.Format == "json" {
		h = slog.NewJSONHandler(stderr, hopts)
	}
	log := slog.New(h).With("component", "meridian-agent")

	conn, closeConn, err := buildConnector(o, log)
	if err != nil {
		return err
	}
	defer closeConn()

	tr, err := telemetry.Setup(ctx, telemetry.Options{ServiceName: "meridian-agent", Version: version})
	if err != nil {
		return err
	}
	defer tr.Close(log) // after bus.Close: the last spans are flushed
	if tr.Enabled() {
		log.Info("OpenTelemetry tracing on (OTEL_TRACES_EXPORTER=otlp)")
	}

	// Replies come to the cluster's own inbox, _INBOX_<cluster>: a
	// hub-issued credential may subscribe there only.
	inbox, err := natsbus.ClusterInboxPrefix(c.ClusterID)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	var vs *vaultSecrets
	natsOpts := o.natsOpts
	if c.Vault.Addr != "" {
		vctx, vcancel := context.WithTimeout(ctx, c.NATS.ConnectTimeout.D())
		vs, err = startVault(vctx, c, log, reg)
		vcancel()
		if err != nil {
			return err
		}
		natsOpts = append(append([]natsbus.Option{}, natsOpts...), vs.natsOpts...)
	}
	cctx, cancel := context.WithTimeout(ctx, c.NATS.ConnectTimeout.D())
	nopts := append([]natsbus.Option{natsbus.WithName("meridian-agent " + c.ClusterID), natsbus.WithLogger(log),
		natsbus.WithTracerProvider(tr.TracerProvider()), natsbus.WithInboxPrefix(inbox)}, natsOpts...)
	bus, err := natsbus.Connect(cctx, c.NATS.URL, nopts...)
	cancel()
	if err != nil {
		return fmt.Errorf("--nats-url: %w", err)
	}
	defer bus.Close()
	if vs != nil {
		vctx, vcancel := context.WithCancel(ctx)
		defer vcancel()
		vs.run(vctx, bus)
	}

	a, err := agent.New(agent.Config{
		ClusterID: c.ClusterID, Bus: bus, Connector: conn, Logger: log, Version: version, Metrics: agent.NewMetrics(reg),
		HeartbeatInterval: c.HeartbeatInterval.D(), AdvertiseInterval: c.AdvertiseInterval.D(), LaunchParallelism: c.LaunchParallelism,
	})
	if err != nil {
		return err
	}
	// The NATS credentials the agent presents: their expiry is a metric.
	a.Metrics().WatchCredentialFiles(c.NATS.CredsFile, c.NATS.TLS.CertFile)
	if c.MetricsAddr != "" {
		ln, err := net.Listen("tcp", c.MetricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", a.Metrics().Handler())
		mux.Handle("/readyz", readyz(vs))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		log.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	}
	log.Info("starting", "cluster", c.ClusterID, "connector", c.Connector)
	return a.Run(ctx)
}
