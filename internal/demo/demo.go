package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meridian-gpu/meridian/connectors/simcluster"
	"github.com/meridian-gpu/meridian/hub/server"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// Options configure one demo run.
type Options struct {
	// Workloads is how many workloads to submit.
	Workloads int
	// Seed makes the workload mix reproducible.
	Seed int64
	// TimeScale is how many simulated seconds pass per real second in the
	// simulated clusters (work declared as 4 minutes runs 4 seconds at 60).
	TimeScale float64
	// Deadline bounds the run; the summary is printed when it passes.
	Deadline time.Duration
	// Forever keeps the hub and the clusters running after the summary.
	Forever bool
	// GRPCAddr and HTTPAddr are tried first; a free port is used when taken.
	GRPCAddr, HTTPAddr string
	// DataDir keeps etcd, NATS and the demo log; empty means a temp dir.
	DataDir string
	// Refresh is the live table's period.
	Refresh time.Duration
	// Live redraws the table in place (a terminal); otherwise progress
	// lines are printed.
	Live bool
}

// DefaultOptions is what `make demo` runs.
func DefaultOptions() Options {
	return Options{
		Workloads: 300, Seed: 42, TimeScale: 60, Deadline: 90 * time.Second,
		GRPCAddr: "127.0.0.1:7070", HTTPAddr: "127.0.0.1:8080", Refresh: 500 * time.Millisecond,
	}
}

// clusterSpec is one simulated spoke: a built-in example cluster file.
type clusterSpec struct{ id, example, what string }

var clusters = []clusterSpec{
	{"us-east", "h100-nvlink", "8 x 8 H100 in two NVLink domains"},
	{"eu-west", "a100-fractional", "6 x 4 A100 with MPS, time-slice and memory fractions"},
	{"us-west", "mixed-l40s-slurm", "6 x 4 L40S in two racks + 2 x 4 GB200, shard and MIG"},
}

// Run starts a hub and three simulated clusters in-process, creates a queue
// tree, submits the workloads, shows their progress and prints a summary.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) (*Summary, error) {
	if o.Workloads <= 0 || o.Workloads > 100000 {
		return nil, fmt.Errorf("--workloads: must be 1..100000, got %d", o.Workloads)
	}
	if o.TimeScale <= 0 {
		return nil, fmt.Errorf("--time-scale: must be positive, got %g", o.TimeScale)
	}
	dir := o.DataDir
	if dir == "" {
		d, err := os.MkdirTemp("", "meridian-demo-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--data-dir: %w", err)
	}
	logPath := filepath.Join(dir, "demo.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("demo log: %w", err)
	}
	defer logFile.Close()
	log := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	fmt.Fprintf(stderr, "meridian demo: starting the hub (embedded etcd and NATS in %s)\n", dir)
	hub, err := server.New(server.Config{
		DataDir:        filepath.Join(dir, "hub"),
		GRPCAddr:       freeOr(o.GRPCAddr),
		HTTPAddr:       freeOr(o.HTTPAddr),
		HubID:          "demo-hub",
		Version:        "demo",
		SchedulePeriod: 200 * time.Millisecond,
		LeaderTTL:      2 * time.Second,
		Logger:         log.With("part", "hub"),
		UnsafeNoFsync:  true,
	})
	if err != nil {
		return nil, fmt.Errorf("start the hub: %w", err)
	}
	hubDone := make(chan error, 1)
	go func() { hubDone <- hub.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case <-hubDone:
		case <-time.After(15 * time.Second):
		}
		_ = hub.Close()
	}()
	addrs := hub.Addrs()
	if err := waitReady(ctx, "http://"+addrs.HTTP+"/readyz", 30*time.Second); err != nil {
		return nil, err
	}

	sims, stopAgents, err := startAgents(ctx, hub.NATSURL(), o.TimeScale, log)
	if err != nil {
		return nil, err
	}
	defer stopAgents()
	for _, c := range clusters {
		fmt.Fprintf(stderr, "meridian demo: cluster %-8s %s\n", c.id, c.what)
	}

	conn, err := grpc.NewClient(addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	c := client{
		wl: meridianv1.NewWorkloadServiceClient(conn),
		q:  meridianv1.NewQueueServiceClient(conn),
		cl: meridianv1.NewClusterServiceClient(conn),
	}
	if err := waitClusters(ctx, c, len(clusters), 30*time.Second); err != nil {
		return nil, err
	}
	if err := createQueues(ctx, c); err != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "meridian demo: queues %s; submitting %d workloads\n", teamList(), o.Workloads)

	mix := generate(o.Workloads, rand.New(rand.NewSource(o.Seed)))
	mon := newMonitor(c, addrs.HTTP, o, stdout, stderr, start)
	var subErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		subErr = submit(ctx, c, mix, mon)
	}()
	sum, err := mon.run(ctx, mix)
	wg.Wait()
	if subErr != nil && err == nil {
		err = subErr
	}
	if err != nil {
		return nil, err
	}
	for _, s := range sims {
		sum.Launches += s.Launches()
	}
	sum.Write(stdout)
	if o.Forever {
		fmt.Fprintf(stdout, "\nThe hub and clusters keep running. Try:\n")
	} else {
		fmt.Fprintf(stdout, "\nRun `make demo-forever` to keep the hub up after the summary, then try:\n")
	}
	fmt.Fprintf(stdout, "  REST     curl -s 'http://%s/v1/workloads?page_size=5'\n", addrs.HTTP)
	fmt.Fprintf(stdout, "           curl -s http://%s/v1/clusters\n", addrs.HTTP)
	fmt.Fprintf(stdout, "  metrics  curl -s http://%s/metrics | grep '^meridian_'\n", addrs.HTTP)
	fmt.Fprintf(stdout, "  CLI      go run ./cmd/meridianctl --hub %s list --phase QUEUED\n", addrs.GRPC)
	fmt.Fprintf(stdout, "           go run ./cmd/meridianctl --hub %s queues\n", addrs.GRPC)
	fmt.Fprintf(stdout, "           go run ./cmd/meridianctl --hub %s clusters\n", addrs.GRPC)
	fmt.Fprintf(stdout, "           go run ./cmd/meridianctl --hub %s submit -f examples/workloads/gang.yaml\n", addrs.GRPC)
	fmt.Fprintf(stdout, "           go run ./cmd/meridianctl --hub %s explain <workload id>\n", addrs.GRPC)
	if o.DataDir != "" || o.Forever {
		fmt.Fprintf(stdout, "  log      %s\n", logPath)
	}
	if o.Forever {
		fmt.Fprintf(stderr, "\nmeridian demo: running until Ctrl-C\n")
		<-ctx.Done()
	}
	return sum, nil
}

type client struct {
	wl meridianv1.WorkloadServiceClient
	q  meridianv1.QueueServiceClient
	cl meridianv1.ClusterServiceClient
}

// freeOr returns addr when it can be listened on now, else a free port on
// the same host, so a second demo or a busy port does not stop the demo.
func freeOr(addr string) string {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		host, _, _ := net.SplitHostPort(addr)
		if host == "" {
			host = "127.0.0.1"
		}
		return net.JoinHostPort(host, "0")
	}
	l.Close()
	return addr
}

func waitReady(ctx context.Context, url string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the hub was not ready within %s (%s): %v", limit, url, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startAgents connects the three simulated clusters to the hub through
// real spoke agents over NATS.
func startAgents(ctx context.Context, natsURL string, scale float64, log *slog.Logger) ([]*simcluster.Cluster, func(), error) {
	var sims []*simcluster.Cluster
	var stops []func()
	stopAll := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	for _, spec := range clusters {
		cfg, err := simcluster.Example(spec.example)
		if err != nil {
			stopAll()
			return nil, nil, err
		}
		clock, err := simcluster.NewScaledClock(scale)
		if err != nil {
			stopAll()
			return nil, nil, err
		}
		sim, err := simcluster.New(cfg, simcluster.Options{Clock: clock, Logger: log.With("cluster", spec.id)})
		if err != nil {
			stopAll()
			return nil, nil, fmt.Errorf("cluster %s: %w", spec.id, err)
		}
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		bus, err := natsbus.Connect(cctx, natsURL, natsbus.WithName("demo-agent-"+spec.id))
		ccancel()
		if err != nil {
			sim.Close()
			stopAll()
			return nil, nil, fmt.Errorf("agent %s: connect to NATS: %w", spec.id, err)
		}
		a, err := agent.New(agent.Config{
			ClusterID: spec.id, Bus: bus, Connector: sim, Logger: log.With("agent", spec.id),
			HeartbeatInterval: 500 * time.Millisecond, AdvertiseInterval: 2 * time.Second, ChangeDelay: 20 * time.Millisecond,
			Version: "demo",
		})
		if err != nil {
			sim.Close()
			bus.Close()
			stopAll()
			return nil, nil, fmt.Errorf("agent %s: %w", spec.id, err)
		}
		actx, acancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Run(actx) }()
		stops = append(stops, func() {
			acancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
			}
			sim.Close()
			bus.Close()
		})
		sims = append(sims, sim)
	}
	return sims, stopAll, nil
}

func waitClusters(ctx context.Context, c client, n int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		resp, err := c.cl.ListClusters(ctx, &meridianv1.ListClustersRequest{})
		ready := 0
		if err == nil {
			for _, cl := range resp.GetClusters() {
				if cl.GetState() == meridianv1.ClusterState_CLUSTER_STATE_READY {
					ready++
				}
			}
			if ready >= n {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d clusters registered within %s (err %v)", ready, n, limit, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// isDone reports whether a workload phase is terminal.
func isDone(p meridianv1.WorkloadPhase) bool {
	switch p {
	case meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED, meridianv1.WorkloadPhase_WORKLOAD_PHASE_FAILED,
		meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED:
		return true
	}
	return false
}

func phaseName(p meridianv1.WorkloadPhase) string {
	return strings.TrimPrefix(p.String(), "WORKLOAD_PHASE_")
}

var errDeadline = errors.New("deadline")
