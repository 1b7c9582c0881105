package run

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/meridian-gpu/meridian/internal/soak/check"
	"github.com/meridian-gpu/meridian/internal/soak/faults"
	"github.com/meridian-gpu/meridian/internal/soak/load"
	"github.com/meridian-gpu/meridian/internal/soak/topology"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

//go:embed simcluster.yaml
var simConfig []byte

// GPUsPerCluster is how many GPUs each soak cluster has (simcluster.yaml).
const GPUsPerCluster = 192

// Config is one soak.
type Config struct {
	// Dir, HubBin, AgentBin, SoakBin and SoakEnv are as in
	// topology.Config.
	Dir, HubBin, AgentBin, SoakBin string
	SoakEnv                        []string
	Hubs, Agents                   int
	// Duration is how long the load runs; faults run inside it.
	Duration time.Duration
	Seed     uint64
	// Rate is the submits per second.
	Rate float64
	// Warmup is the fault-free time at the start; zero means 15 s.
	Warmup time.Duration
	// Settle bounds the wait, after the load stops, for in-flight work
	// to finish; zero means 90 s.
	Settle time.Duration
	// LeaderTTL, ClusterTimeout and SchedulePeriod are the hubs'; zero
	// means 3 s, 15 s and meridian-hub's default.
	LeaderTTL, ClusterTimeout, SchedulePeriod time.Duration
	// Kinds are the faults to draw from; nil means all.
	Kinds []faults.Kind
	// MaxInFlight holds the load back while more workloads are in flight;
	// zero means 5,000.
	MaxInFlight int
	// Out receives progress lines.
	Out io.Writer
}

func (c *Config) defaults() {
	if c.Hubs == 0 {
		c.Hubs = 3
	}
	if c.Agents == 0 {
		c.Agents = 4
	}
	if c.Warmup == 0 {
		c.Warmup = 15 * time.Second
	}
	if c.Settle == 0 {
		c.Settle = 90 * time.Second
	}
	if c.LeaderTTL == 0 {
		c.LeaderTTL = 3 * time.Second
	}
	if c.ClusterTimeout == 0 {
		c.ClusterTimeout = 15 * time.Second
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 5000
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
}

// Queues are the soak's queues and their share of the load: a tenant
// "soak" holding every GPU, and three projects, two of which borrow at
// most a fixed amount (their caps are what the quota check watches).
func Queues(agents int) ([]*meridianv1.Queue, check.Caps, []load.QueueShare) {
	total := int64(GPUsPerCluster*agents) * 1000
	a, b := total*40/100, total*33/100
	ptr := func(v int64) *int64 { return &v }
	qs := []*meridianv1.Queue{
		{Path: "soak", Weight: 1, Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: load.Class, NominalMilliGpus: total}}},
		{Path: "soak/a", Weight: 2, Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: load.Class, NominalMilliGpus: a, BorrowLimitMilli: ptr(total * 10 / 100)}}},
		{Path: "soak/b", Weight: 1, Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: load.Class, NominalMilliGpus: b, BorrowLimitMilli: ptr(total * 5 / 100)}}},
		{Path: "soak/c", Weight: 1, Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: load.Class, NominalMilliGpus: total - a - b}}},
	}
	caps := check.Caps{
		"soak/a": {load.Class: a + total*10/100},
		"soak/b": {load.Class: b + total*5/100},
	}
	return qs, caps, []load.QueueShare{{Path: "soak/a", Share: 0.5}, {Path: "soak/b", Share: 0.3}, {Path: "soak/c", Share: 0.2}}
}

// Run runs the soak and returns its summary; the error is for a soak that
// could not run at all (a broken invariant is Summary.OK false).
func Run(ctx context.Context, cfg Config) (*Summary, error) {
	cfg.defaults()
	out := cfg.Out
	logf := func(format string, args ...any) {
		fmt.Fprintf(out, "%s soak: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
	simPath := filepath.Join(cfg.Dir, "simcluster.yaml")
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(simPath, simConfig, 0o644); err != nil {
		return nil, err
	}
	top, err := topology.Up(ctx, topology.Config{
		Dir: cfg.Dir, HubBin: cfg.HubBin, AgentBin: cfg.AgentBin, SoakBin: cfg.SoakBin, SoakEnv: cfg.SoakEnv,
		Hubs: cfg.Hubs, Agents: cfg.Agents, SimConfig: simPath, AgentProxies: needsProxies(cfg.Kinds),
		LeaderTTL: cfg.LeaderTTL, ClusterTimeout: cfg.ClusterTimeout, SchedulePeriod: cfg.SchedulePeriod,
		// The check follows etcd with a live watch; history older than
		// this is dropped, so a watch broken by a fault has this long to
		// resume (and the database stays bounded on long soaks).
		EtcdCompactEvery: 10 * time.Minute,
		Progress:         out,
	})
	if err != nil {
		return nil, err
	}
	closed := false
	closeTop := func() {
		if !closed {
			closed = true
			logf("stopping every process")
			top.Close()
		}
	}
	defer closeTop()

	queues, caps, shares := Queues(cfg.Agents)
	if err := createQueues(ctx, top, queues); err != nil {
		return nil, err
	}
	ec, err := top.EtcdClient()
	if err != nil {
		return nil, err
	}
	defer ec.Close()
	gr, err := ec.Get(ctx, "/meridian-soak/ready")
	if err != nil {
		return nil, err
	}
	hist := check.NewHistory(caps)
	hctx, stopHist := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHist()
	var hwg sync.WaitGroup
	hwg.Add(1)
	go func() { defer hwg.Done(); hist.Follow(hctx, ec, gr.Header.Revision+1) }()

	var conns []*grpc.ClientConn
	for _, h := range top.Hubs {
		c, err := top.Dial(h)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		conns = append(conns, c)
	}
	drv, err := load.New(load.Config{
		Mix:  load.Mix{Seed: cfg.Seed, Queues: shares},
		Rate: cfg.Rate, Conns: conns, InFlight: hist.InFlight, MaxInFlight: cfg.MaxInFlight,
	})
	if err != nil {
		return nil, err
	}
	plan := faults.Plan(faults.PlanConfig{Seed: cfg.Seed, Span: cfg.Duration - cfg.Warmup - 5*time.Second,
		LeaderTTL: cfg.LeaderTTL, ClusterTimeout: cfg.ClusterTimeout, Kinds: cfg.Kinds})
	logf("seed %d: %d faults planned over %s, load %.0f/s for %s", cfg.Seed, len(plan), cfg.Duration, cfg.Rate, cfg.Duration)
	for _, f := range plan {
		logf("  plan +%s %s hold %s", (cfg.Warmup + f.At).Round(100*time.Millisecond), f.Kind, f.Hold)
	}

	start := time.Now()
	lctx, stopLoad := context.WithTimeout(ctx, cfg.Duration)
	defer stopLoad()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); drv.Run(lctx) }()
	inj := &faults.Injector{Top: top, Log: out}
	wg.Add(1)
	go func() { defer wg.Done(); inj.Run(ctx, start.Add(cfg.Warmup), plan) }()

	peak := 0
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	progress := func(phase string) {
		s := drv.Stats()
		inFlight := hist.InFlight()
		peak = max(peak, inFlight)
		logf("%s +%s: acked %d (%.0f/s), errors %d, skipped %d, held %d, in flight %d, dispatches %d, etcd rev %d",
			phase, time.Since(start).Round(time.Second), s.Acked, float64(s.Acked)/time.Since(start).Seconds(), s.Failed, s.Skipped, s.Held,
			inFlight, len(hist.Report().Dispatches), hist.LastRevision())
	}
	for lctx.Err() == nil {
		select {
		case <-lctx.Done():
		case <-tick.C:
			progress("load")
		}
	}
	wg.Wait() // the driver and the injector
	loadEnd := time.Now()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	logf("load stopped after %s; waiting up to %s for in-flight work to finish", loadEnd.Sub(start).Round(time.Millisecond), cfg.Settle)
	settleBy := time.Now().Add(cfg.Settle)
	for hist.InFlight() > 0 && time.Now().Before(settleBy) && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
		if n := int(time.Since(loadEnd).Seconds()); n%10 == 0 {
			progress("settle")
		}
	}
	progress("settled")
	// Let the watch catch up with the last commits, then stop it.
	time.Sleep(2 * time.Second)
	stopHist()
	hwg.Wait()
	closeTop() // the agents flush and close their journals
	journals := map[string]string{}
	for _, a := range top.Agents {
		journals[a.ClusterID] = a.Journal
	}
	launches, err := check.ReadLaunches(journals)
	if err != nil {
		return nil, fmt.Errorf("launch journals: %w", err)
	}
	sum := summarize(cfg, start, loadEnd, drv, hist.Report(), launches, inj.Records(), peak)
	return sum, nil
}

// needsProxies reports whether any of kinds (nil: all) cuts or slows an
// agent's NATS traffic.
func needsProxies(kinds []faults.Kind) bool {
	if kinds == nil {
		kinds = faults.AllKinds()
	}
	for _, k := range kinds {
		if k.NeedsProxies() {
			return true
		}
	}
	return false
}

// createQueues creates the soak's queues on any hub, retrying while the
// hubs settle.
func createQueues(ctx context.Context, top *topology.Topology, qs []*meridianv1.Queue) error {
	for _, q := range qs {
		deadline := time.Now().Add(30 * time.Second)
		for {
			h := top.LiveHub()
			if h == nil {
				return errors.New("no hub runs")
			}
			c, err := top.Dial(h)
			if err != nil {
				return err
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err = meridianv1.NewQueueServiceClient(c).CreateQueue(cctx, &meridianv1.CreateQueueRequest{Queue: q})
			cancel()
			c.Close()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("create queue %s: %w", q.Path, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}
