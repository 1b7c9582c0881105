package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/meridian-gpu/meridian/hub/server"
	cc "github.com/meridian-gpu/meridian/internal/componentconfig"
	"github.com/meridian-gpu/meridian/internal/telemetry"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		cc.PrintError(os.Stderr, "meridian-hub", err)
		os.Exit(1)
	}
}

// run executes the meridian-hub command line: serve, or a config command.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := newCommand(stdout, stderr, serve)
	cmd.SetArgs(append([]string{}, args...)) // never nil: cobra would read os.Args
	return cmd.ExecuteContext(ctx)
}

// addrInfo is what --addr-file holds and what the banner shows.
type addrInfo struct {
	HubID string   `json:"hub_id"`
	GRPC  string   `json:"grpc"`
	HTTP  string   `json:"http"`
	NATS  string   `json:"nats"`
	Etcd  []string `json:"etcd"`
}

// serve runs the hub until ctx ends.
func serve(ctx context.Context, o *options, stdout, stderr io.Writer) error {
	hopts := &slog.HandlerOptions{Level: o.logLevel}
	var h slog.Handler = slog.NewTextHandler(stderr, hopts)
	if o.conf.Logging.Format == "json" {
		h = slog.NewJSONHandler(stderr, hopts)
	}
	o.cfg.Logger = slog.New(h)
	server.TuneGC(o.conf.GCPercent, o.cfg.Logger)
	server.TuneMemoryLimit(o.cfg.Logger)
	tr, err := telemetry.Setup(ctx, telemetry.Options{ServiceName: "meridian-hub", Version: version})
	if err != nil {
		return err
	}
	defer tr.Close(o.cfg.Logger) // after s.Close: the last spans are flushed
	if tr.Enabled() {
		o.cfg.Logger.Info("OpenTelemetry tracing on (OTEL_TRACES_EXPORTER=otlp)")
	}
	o.cfg.TracerProvider = tr.TracerProvider()
	stopVault, err := startVault(ctx, o, o.cfg.Logger)
	if err != nil {
		return err
	}
	defer stopVault()
	s, err := server.New(o.cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	a := s.Addrs()
	info := addrInfo{HubID: s.HubID(), GRPC: a.GRPC, HTTP: a.HTTP, NATS: s.NATSURL(), Etcd: s.EtcdEndpoints()}
	printBanner(stdout, info, s, o)
	if o.conf.AddrFile != "" {
		b, _ := json.MarshalIndent(info, "", "  ")
		if err := os.WriteFile(o.conf.AddrFile, append(b, '\n'), 0o644); err != nil {
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
	fmt.Fprintf(w, "  etcd      %s (%s%s)\n", strings.Join(info.Etcd, ","), mode(etcdEmb), etcdSecurity(o.cfg.EtcdClient))
}

// etcdSecurity says how the hub reaches an external etcd, for the banner.
func etcdSecurity(e server.EtcdClient) string {
	out := ""
	switch {
	case e.CertFile != "":
		out += ", TLS with a client certificate"
	case e.TLS():
		out += ", TLS"
	}
	if e.Username != "" {
		out += ", user " + e.Username
	}
	return out
}
