package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meridian-gpu/meridian/connectors/simcluster"
	"github.com/meridian-gpu/meridian/hub/server"
	"github.com/meridian-gpu/meridian/internal/localrun"
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
	// Real, when set, puts a real cluster in the place of one simulated
	// cluster (make demo-slurm: the local Slurm cluster instead of us-east)
	// or beside them (make demo-k8s).
	Real *Spoke
}

// Spoke is a real cluster the demo connects through a spoke agent in the
// place of a simulated one.
type Spoke struct {
	// ID and What name the cluster in the output.
	ID, What string
	// Replaces is the id of the simulated cluster it stands in for; empty
	// means it joins the three simulated clusters.
	Replaces string
	// Connector drives the cluster. Run starts an agent on it but does not
	// close it.
	Connector agent.Connector
	// GPUs is its capacity per accelerator class (the tenant's quota).
	GPUs map[string]int64
	// Runtime is the template a workload of the mix carries so that the
	// cluster can run it: run is how long it should run in real time (the
	// simulated duration divided by the time scale), exitCode how it ends.
	Runtime func(run time.Duration, exitCode int) *meridianv1.RuntimeTemplate
	// Launches, when set, counts the cluster's launches for the summary.
	Launches func() int
	// Hints, when set, returns lines printed with the commands to try
	// after the summary (how to look at the real cluster), given the hub's
	// gRPC address.
	Hints func(hubGRPC string) []string
}

// DefaultOptions is what `make demo` runs.
func DefaultOptions() Options {
	return Options{
		Workloads: 300, Seed: 42, TimeScale: 60, Deadline: 90 * time.Second,
		GRPCAddr: "127.0.0.1:7070", HTTPAddr: "127.0.0.1:8080", Refresh: 500 * time.Millisecond,
	}
}

// clusterSpec is one spoke: a built-in example cluster file, or a real
// cluster's connector.
type clusterSpec struct {
	id, example, what string
	conn              agent.Connector
}

// spokes is the demo's federation: the three simulated clusters, one of
// them replaced by o.Real when set.
func (o Options) spokes() ([]clusterSpec, error) {
	if o.Real == nil {
		return clusters, nil
	}
	if o.Real.Connector == nil || o.Real.Runtime == nil || o.Real.ID == "" {
		return nil, errors.New("demo: Options.Real needs an ID, a Connector and a Runtime")
	}
	real := clusterSpec{id: o.Real.ID, what: o.Real.What, conn: o.Real.Connector}
	if o.Real.Replaces == "" {
		return append(slices.Clone(clusters), real), nil
	}
	var out []clusterSpec
	found := false
	for _, c := range clusters {
		if c.id == o.Real.Replaces {
			c, found = real, true
		}
		out = append(out, c)
	}
	if !found {
		return nil, fmt.Errorf("demo: Options.Real.Replaces: no simulated cluster %q", o.Real.Replaces)
	}
	return out, nil
}

// capacity is the federation's GPUs per class for these spokes.
func capacity(specs []clusterSpec, real *Spoke) (map[string]int64, error) {
	out := map[string]int64{}
	for _, s := range specs {
		if s.conn != nil {
			continue
		}
		cfg, err := simcluster.Example(s.example)
		if err != nil {
			return nil, err
		}
		for _, n := range cfg.Nodes {
			if n.GPUs > 0 && n.AcceleratorClass != "" {
				out[n.AcceleratorClass] += int64(max(n.Count, 1) * n.GPUs)
			}
		}
	}
	if real != nil {
		for class, n := range real.GPUs {
			out[class] += n
		}
	}
	return out, nil
}

var clusters = []clusterSpec{
	{id: "us-east", example: "h100-nvlink", what: "8 x 8 H100 in two NVLink domains"},
	{id: "eu-west", example: "a100-fractional", what: "6 x 4 A100 with MPS, time-slice and memory fractions"},
	{id: "us-west", example: "mixed-l40s-slurm", what: "6 x 4 L40S in two racks + 2 x 4 GB200, shard and MIG"},
}

// Run starts a hub and three simulated clusters in-process, creates a queue
// tree, submits the workloads, shows their progress and prints a summary.
// It then leaves a few workloads waiting for reasons worth explaining
// (exhibits.go) and prints the commands to look at them.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) (*Summary, error) {
	if o.Workloads <= 0 || o.Workloads > 100000 {
		return nil, fmt.Errorf("--workloads: must be 1..100000, got %d", o.Workloads)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	f, err := startFederation(ctx, o, stderr)
	if err != nil {
		return nil, err
	}
	defer f.close()
	fmt.Fprintf(stderr, "meridian demo: queues %s; submitting %d workloads\n", teamList(), o.Workloads)

	mix := generate(o.Workloads, rand.New(rand.NewSource(o.Seed)))
	if o.Real != nil {
		if err := addRuntimes(mix, o.Real, o.TimeScale); err != nil {
			return nil, err
		}
	}
	mon := newMonitor(f.c, f.addrs.HTTP, o, stdout, stderr, start)
	mon.token = f.token
	var subErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		subErr = submit(ctx, f.c, mix, mon)
	}()
	sum, err := mon.run(ctx, mix)
	wg.Wait()
	if subErr != nil && err == nil {
		err = subErr
	}
	if err != nil {
		return nil, err
	}
	for _, s := range f.sims {
		sum.Launches += s.Launches()
	}
	if o.Real != nil && o.Real.Launches != nil {
		sum.Launches += o.Real.Launches()
	}
	for _, s := range f.specs {
		sum.clusterIDs = append(sum.clusterIDs, s.id)
	}
	sum.Write(stdout)

	var left []exhibitResult
	if o.Real == nil { // the exhibits are sized for the simulated federation
		fmt.Fprintf(stderr, "meridian demo: leaving a few workloads waiting, to explore\n")
		if left, err = leaveExhibits(ctx, f.c, 20*time.Second); err != nil {
			return nil, err
		}
	}
	printNextSteps(stdout, o, f, left)
	if o.Forever {
		fmt.Fprintf(stderr, "\nmeridian demo: running until Ctrl-C\n")
		<-ctx.Done()
		if f.keptDir != "" {
			fmt.Fprintf(stderr, "meridian demo: stopped; its state and log stay in %s (delete it when done)\n", f.keptDir)
		}
	}
	return sum, nil
}

// printNextSteps prints the commands to try after the summary. With
// --forever they are copyable as printed once MERIDIAN_CONFIG points at
// the demo's meridianctl configuration: the workloads left waiting first,
// then the general ones. Without it the hub stops when the demo returns
// (and its state directory, token included, is deleted unless --data-dir
// kept it), so the demo shows what explain says about each waiting
// workload itself and prints the commands with placeholders, for the hub
// `make demo-forever` keeps up: a path or an id of this run would only
// fail when pasted.
func printNextSteps(w io.Writer, o Options, f *federation, left []exhibitResult) {
	const ctl = "go run ./cmd/meridianctl"
	cfg := f.cliConfig
	token := filepath.Join(filepath.Dir(f.cliConfig), "admin.token")
	if o.Forever {
		fmt.Fprintf(w, "\nThe hub and clusters keep running. In a second terminal:\n")
	} else {
		if len(left) > 0 {
			fmt.Fprintf(w, "\nLeft waiting when the demo ended, each for a different reason (what `meridianctl explain` says):\n")
			for _, e := range left {
				fmt.Fprintf(w, "  %-13s %-14s %s\n", e.name, e.code, e.reason)
			}
		}
		fmt.Fprintf(w, "\nThis hub stops now. Run `make demo-forever` to keep one up: it prints these commands\n")
		fmt.Fprintf(w, "with its own paths and workload ids, ready to paste in a second terminal:\n")
		cfg = "<its state directory>/meridianctl.yaml"
		token = "<its state directory>/admin.token"
	}
	fmt.Fprintf(w, "  first    export MERIDIAN_CONFIG=%s   # the demo hub and its admin token\n", cfg)
	fmt.Fprintf(w, "  browser  http://%s/ui/   # the ops dashboard: sign in with the token in %s\n", f.addrs.HTTP, token)
	fmt.Fprintf(w, "           %s whoami\n", ctl)
	if len(left) > 0 {
		if o.Forever {
			fmt.Fprintf(w, "  Left waiting, each for a different reason:\n")
			for _, e := range left {
				fmt.Fprintf(w, "           %s explain %s   # %s\n", ctl, e.id, e.why)
			}
		} else {
			fmt.Fprintf(w, "           %s explain <id>   # for each workload it leaves waiting\n", ctl)
		}
		fmt.Fprintf(w, "           %s list --phase QUEUED\n", ctl)
	}
	fmt.Fprintf(w, "  CLI      %s queues\n", ctl)
	fmt.Fprintf(w, "           %s clusters\n", ctl)
	fmt.Fprintf(w, "           %s submit -f examples/workloads/gang.yaml   # then: get <id>, explain <id>\n", ctl)
	fmt.Fprintf(w, "           %s queue apply --dry-run -f examples/queues/acme.yaml\n", ctl)
	fmt.Fprintf(w, "           %s audit --limit 10\n", ctl)
	auth := fmt.Sprintf("-H \"Authorization: Bearer $(cat %s)\"", token)
	fmt.Fprintf(w, "  REST     curl -s %s 'http://%s/v1/workloads?page_size=5'\n", auth, f.addrs.HTTP)
	fmt.Fprintf(w, "           curl -s %s 'http://%s/v1/clusters'\n", auth, f.addrs.HTTP)
	fmt.Fprintf(w, "  metrics  curl -s %s 'http://%s/metrics' | grep '^meridian_'\n", auth, f.addrs.HTTP)
	if o.Real != nil && o.Real.Hints != nil {
		for _, h := range o.Real.Hints(f.addrs.GRPC) {
			fmt.Fprintf(w, "  %s\n", h)
		}
	}
	if o.DataDir != "" || o.Forever {
		fmt.Fprintf(w, "  log      %s\n", f.logPath)
	}
}

// federation is a running demo hub with its spokes and queue tree: what
// `make demo` runs its workloads on, and what TestExamplesRun applies the
// examples to.
type federation struct {
	addrs   server.Addrs
	c       client
	specs   []clusterSpec
	sims    []*simcluster.Cluster
	logPath string
	// token is the admin API token the hub wrote; cliConfig a meridianctl
	// configuration file whose context uses it.
	token, cliConfig string
	// keptDir is the state directory the demo made and keeps (--forever
	// without --data-dir), so the log it printed outlives the run.
	keptDir string
	closers []func()
}

func (f *federation) close() {
	for i := len(f.closers) - 1; i >= 0; i-- {
		f.closers[i]()
	}
	f.closers = nil
}

// startFederation starts the hub on embedded etcd and NATS, the spokes
// behind real agents, and the queue tree of examples/queues/acme.yaml. On
// an error it stops what it started.
func startFederation(ctx context.Context, o Options, stderr io.Writer) (_ *federation, err error) {
	if o.TimeScale <= 0 {
		return nil, fmt.Errorf("--time-scale: must be positive, got %g", o.TimeScale)
	}
	f := &federation{}
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	dir := o.DataDir
	if dir == "" {
		d, err := os.MkdirTemp("", "meridian-demo-")
		if err != nil {
			return nil, err
		}
		dir = d
		if o.Forever {
			f.keptDir = d // its log path is printed for later: keep it
		} else {
			f.closers = append(f.closers, func() { os.RemoveAll(d) })
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--data-dir: %w", err)
	}
	f.logPath = filepath.Join(dir, "demo.log")
	logFile, err := os.Create(f.logPath)
	if err != nil {
		return nil, fmt.Errorf("demo log: %w", err)
	}
	f.closers = append(f.closers, func() { logFile.Close() })
	log := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))
	server.TuneGC(server.DefaultGCPercent, log) // as meridian-hub does

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
		// Authentication on, as in production: the hub writes the demo's
		// admin API token, and the demo hands it to meridianctl.
		Security: server.Security{Mode: server.AuthOn, AdminTokenFile: filepath.Join(dir, "admin.token"),
			AuditFile: filepath.Join(dir, "audit.log")},
	})
	if err != nil {
		return nil, fmt.Errorf("start the hub: %w", err)
	}
	hubCtx, stopHub := context.WithCancel(ctx)
	hubDone := make(chan error, 1)
	go func() { hubDone <- hub.Run(hubCtx) }()
	f.closers = append(f.closers, func() {
		stopHub()
		select {
		case <-hubDone:
		case <-time.After(15 * time.Second):
		}
		_ = hub.Close()
	})
	f.addrs = hub.Addrs()
	if err := localrun.WaitReady(ctx, "http://"+f.addrs.HTTP+"/readyz", 30*time.Second); err != nil {
		return nil, err
	}

	if f.specs, err = o.spokes(); err != nil {
		return nil, err
	}
	gpus := classGPUs
	if o.Real != nil {
		if gpus, err = capacity(f.specs, o.Real); err != nil {
			return nil, err
		}
	}
	sims, stopAgents, err := startAgents(hubCtx, hub.NATSURL(), o.TimeScale, log, f.specs)
	if err != nil {
		return nil, err
	}
	f.sims = sims
	f.closers = append(f.closers, stopAgents)
	for _, c := range f.specs {
		fmt.Fprintf(stderr, "meridian demo: cluster %-8s %s\n", c.id, c.what)
	}

	token, err := os.ReadFile(filepath.Join(dir, "admin.token"))
	if err != nil {
		return nil, fmt.Errorf("demo: the hub's admin token: %w", err)
	}
	f.token = strings.TrimSpace(string(token))
	if f.cliConfig, err = writeCLIConfig(dir, f.addrs.GRPC, filepath.Join(dir, "admin.token")); err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(f.addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()), localrun.Bearer(f.token))
	if err != nil {
		return nil, err
	}
	f.closers = append(f.closers, func() { conn.Close() })
	f.c = client{
		wl: meridianv1.NewWorkloadServiceClient(conn),
		q:  meridianv1.NewQueueServiceClient(conn),
		cl: meridianv1.NewClusterServiceClient(conn),
	}
	if err := waitClusters(ctx, f.c, len(f.specs), 30*time.Second); err != nil {
		return nil, err
	}
	if err := createQueues(ctx, f.c, gpus); err != nil {
		return nil, err
	}
	return f, nil
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

// startAgents connects the spokes to the hub through real spoke agents
// over NATS, building a simulated cluster for each spec without a
// connector.
func startAgents(ctx context.Context, natsURL string, scale float64, log *slog.Logger, specs []clusterSpec) ([]*simcluster.Cluster, func(), error) {
	var sims []*simcluster.Cluster
	var stops []func()
	stopAll := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	for _, spec := range specs {
		if spec.conn != nil {
			stop, err := StartAgent(ctx, natsURL, spec.id, spec.conn, log)
			if err != nil {
				stopAll()
				return nil, nil, err
			}
			stops = append(stops, stop)
			continue
		}
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
		stop, err := StartAgent(ctx, natsURL, spec.id, sim, log)
		if err != nil {
			sim.Close()
			stopAll()
			return nil, nil, err
		}
		stops = append(stops, func() {
			stop()
			sim.Close()
		})
		sims = append(sims, sim)
	}
	return sims, stopAll, nil
}

// StartAgent runs a real spoke agent for conn over its own NATS connection,
// with the short heartbeat and advertisement periods the demo and the
// benchmarks use; busOpts configure that connection. The returned func
// stops it (the connector stays open).
func StartAgent(ctx context.Context, natsURL, id string, conn agent.Connector, log *slog.Logger, busOpts ...natsbus.Option) (func(), error) {
	return localrun.Agent(ctx, ctx, natsURL, "demo-agent-"+id, agent.Config{
		ClusterID: id, Connector: conn, Logger: log.With("agent", id),
		HeartbeatInterval: 500 * time.Millisecond, AdvertiseInterval: 2 * time.Second, ChangeDelay: 20 * time.Millisecond,
		Version: "demo",
	}, busOpts...)
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

// writeCLIConfig writes a meridianctl configuration file with one context,
// "demo", that reaches the hub with the admin token, and returns its path.
func writeCLIConfig(dir, hubAddr, tokenFile string) (string, error) {
	path := filepath.Join(dir, "meridianctl.yaml")
	body := fmt.Sprintf(`# meridianctl configuration for the demo hub: export MERIDIAN_CONFIG=%s
apiVersion: meridian.io/v1
kind: Config
currentContext: demo
contexts:
  - name: demo
    hub: %s
    tokenFile: %s
`, path, hubAddr, tokenFile)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		return "", fmt.Errorf("demo: meridianctl configuration: %w", err)
	}
	return path, nil
}
