package slurm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// Kind is the connector kind.
const Kind = "slurm"

// Config configures a Connector. Zero values take the defaults noted.
type Config struct {
	// RESTURL is slurmrestd's base URL, e.g. http://127.0.0.1:6820. Empty
	// means CLI only.
	RESTURL string
	// User is the Slurm user jobs run as and the JWT's "sun" claim
	// (default "root" when running as root, else $USER).
	User string
	// Token is a fixed JWT for slurmrestd. When empty, JWTKeyFile is used
	// to mint short-lived tokens.
	Token string
	// JWTKeyFile is slurmctld's jwt_key file (AuthAltParameters=jwt_key=).
	JWTKeyFile string
	// TokenLifetime of minted tokens (default 1h).
	TokenLifetime time.Duration
	// APIVersion picks the adapter (default "v0.0.38").
	APIVersion string
	// CLI enables the Slurm command-line fallback (sinfo/squeue --json,
	// sbatch, scancel, scontrol). It is also what carries --switches and
	// --nodelist, which slurmrestd v0.0.38 cannot. Default: enabled when
	// sbatch is on PATH (or in BinDir).
	CLI *bool
	// BinDir holds the Slurm commands (default: PATH).
	BinDir string
	// SlurmConf is exported as SLURM_CONF to the commands (default: as
	// inherited).
	SlurmConf string
	// Partition jobs go to and whose nodes are advertised (default: all
	// nodes, the cluster's default partition).
	Partition string
	// ClusterID is written into job comments so that two agents sharing
	// one Slurm never touch each other's jobs.
	ClusterID string
	// Labels are the cluster's labels in the inventory.
	Labels map[string]string
	// Classes maps a GRES type (h100) to an accelerator class; unknown
	// types become "nvidia-<type>".
	Classes map[string]string
	// GPUMemoryMiB maps a GRES type to the memory of one GPU.
	GPUMemoryMiB map[string]int64
	// Workdir is the default job working directory (default /tmp).
	Workdir string
	// PollInterval between job state polls (default 2s). It must stay
	// well below Slurm's MinJobAge (300s by default), after which
	// finished jobs vanish.
	PollInterval time.Duration
	// RetainFinished is how long finished dispatches stay in List (default 1h).
	RetainFinished time.Duration
	// RequestTimeout bounds one call to Slurm (default 30s).
	RequestTimeout time.Duration
	// HTTPClient for slurmrestd (default: a client with RequestTimeout).
	HTTPClient *http.Client
	// Logger for warnings and state changes (default: discard).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Connector drives one Slurm cluster; it implements agent.Connector.
type Connector struct {
	cfg     Config
	log     *slog.Logger
	now     func() time.Time
	rest    backend // nil when CLI only
	cli     *cliBackend
	primary backend

	// ids serializes Launch and Cancel per dispatch id (check-then-submit
	// must not interleave for one id); different ids run in parallel.
	ids    idLocks
	pollMu sync.Mutex // one refresh at a time

	mu       sync.Mutex
	recs     map[string]*record
	rejected map[string]string // dispatch id -> Slurm's reason
	// synced is set by the first complete job poll: from then on every job
	// of ours that Slurm holds is in recs, so Launch needs no job listing
	// except for dispatches in uncertain (a submit that failed with a
	// fault may still have created the job).
	synced    bool
	uncertain map[string]bool
	// lastJobs is the latest job list read (by a poll or an inventory) and
	// when, by the wall clock: an inventory right after reuses it instead
	// of asking slurmctld again (see jobListReuse).
	lastJobs   []JobInfo
	lastJobsAt time.Time
	// listing is the job listing in flight, if any, and listSeq counts
	// the listings started: concurrent callers share one (see listJobs).
	listing *listCall
	listSeq uint64
	// topo is the leaf switch of each node and when it was read; the
	// topology is read again after topologyTTL.
	topo   map[string]string
	topoAt time.Time
	// topoMu is held while scontrol reads the topology, so concurrent
	// inventories (the first Launches all learn the cluster's shape) fork
	// it once.
	topoMu sync.Mutex
	shape  *clusterShape
	closed bool

	events *agent.EventQueue
	stop   chan struct{}
	done   chan struct{}

	stats Stats
}

// Stats are counters an operator (or the agent's metrics) can read.
type Stats struct {
	Submits      atomic.Int64 // jobs submitted
	Rejects      atomic.Int64 // dispatches refused with a Slurm reason
	SubmitErrors atomic.Int64 // retryable submit failures
	PollErrors   atomic.Int64 // failed job polls
	Fallbacks    atomic.Int64 // reads or cancels served by the CLI after REST failed
}

type record struct {
	dispatchID, workloadID string
	jobID                  int64
	state                  agent.WorkState
	emittedRunning         bool
	emittedTerminal        bool
	nodes                  []string
	submitted              time.Time
	started, finished      time.Time
	exit                   *int32
	reason                 string
	gpuMilli               int64
	preempt                bool
	missing                int
}

var _ agent.Connector = (*Connector)(nil)

// New builds a connector and starts its poll loop. Close it when done.
func New(cfg Config) (*Connector, error) {
	if cfg.APIVersion == "" {
		cfg.APIVersion = "v0.0.38"
	}
	ad, err := AdapterFor(cfg.APIVersion)
	if err != nil {
		return nil, fmt.Errorf("slurm: api version: %w", err)
	}
	if cfg.User == "" {
		if os.Geteuid() == 0 {
			cfg.User = "root"
		} else {
			cfg.User = os.Getenv("USER")
		}
	}
	if cfg.TokenLifetime <= 0 {
		cfg.TokenLifetime = time.Hour
	}
	if cfg.Workdir == "" {
		cfg.Workdir = "/tmp"
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 2 * time.Second
	}
	if cfg.RetainFinished <= 0 {
		cfg.RetainFinished = time.Hour
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 30 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ClusterID != "" && !idPattern.MatchString(cfg.ClusterID) {
		return nil, fmt.Errorf("slurm: cluster_id %q: must be letters, digits, '.', '_', ':' or '-'", cfg.ClusterID)
	}
	c := &Connector{
		cfg: cfg, log: cfg.Logger, now: cfg.Now,
		recs: map[string]*record{}, rejected: map[string]string{}, uncertain: map[string]bool{},
		events: agent.NewEventQueue(),
		stop:   make(chan struct{}), done: make(chan struct{}),
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	cli := &cliBackend{binDir: cfg.BinDir, ad: ad}
	if cfg.SlurmConf != "" {
		cli.env = []string{"SLURM_CONF=" + cfg.SlurmConf}
	}
	useCLI := cli.available()
	if cfg.CLI != nil {
		if *cfg.CLI && !useCLI {
			return nil, fmt.Errorf("slurm: cli: sbatch not found (bin dir %q)", cfg.BinDir)
		}
		useCLI = *cfg.CLI
	}
	if useCLI {
		c.cli = cli
	}
	if cfg.RESTURL != "" {
		if !strings.HasPrefix(cfg.RESTURL, "http://") && !strings.HasPrefix(cfg.RESTURL, "https://") {
			return nil, fmt.Errorf("slurm: rest_url %q: must start with http:// or https://", cfg.RESTURL)
		}
		ts := &tokenSource{user: cfg.User, fixed: cfg.Token, lifetime: cfg.TokenLifetime, now: cfg.Now}
		if ts.fixed == "" {
			if cfg.JWTKeyFile == "" {
				return nil, errors.New("slurm: token: neither a token nor a jwt_key_file is configured for slurmrestd")
			}
			key, err := os.ReadFile(cfg.JWTKeyFile)
			if err != nil {
				return nil, fmt.Errorf("slurm: jwt_key_file: %w", err)
			}
			ts.key = key
		}
		hc := cfg.HTTPClient
		if hc == nil {
			hc = &http.Client{Timeout: cfg.RequestTimeout}
		}
		c.rest = &restBackend{base: strings.TrimRight(cfg.RESTURL, "/"), hc: hc, tok: ts, ad: ad}
		c.primary = c.rest
	} else if c.cli != nil {
		c.primary = c.cli
	} else {
		return nil, errors.New("slurm: rest_url: empty and the Slurm commands are not available; nothing to talk to")
	}
	c.start()
	return c, nil
}

func (c *Connector) start() {
	go c.pollLoop()
}

// Close stops the poll loop and the event pump; events not yet read are
// dropped. It is idempotent.
func (c *Connector) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	close(c.stop)
	<-c.done
	c.events.Close()
}

// Kind returns "slurm".
func (c *Connector) Kind() string { return Kind }

// Events delivers state changes in order; see agent.Connector.
func (c *Connector) Events() <-chan agent.WorkEvent { return c.events.Events() }

// Counters returns the connector's counters.
func (c *Connector) Counters() *Stats { return &c.stats }

// ---- backends with fallback ------------------------------------------------

func (c *Connector) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.RequestTimeout)
}

// read runs a read on the primary backend and, when that fails with a
// fault and the CLI is there, on the CLI.
func read[T any](c *Connector, ctx context.Context, what string, f func(backend, context.Context) (T, error)) (T, error) {
	cctx, cancel := c.opCtx(ctx)
	v, err := f(c.primary, cctx)
	cancel()
	if err == nil || c.primary == backend(c.cli) || c.cli == nil || ctx.Err() != nil {
		return v, err
	}
	c.log.Warn("slurm REST call failed; using the CLI", "op", what, "err", err)
	c.stats.Fallbacks.Add(1)
	cctx, cancel = c.opCtx(ctx)
	defer cancel()
	v2, err2 := f(c.cli, cctx)
	if err2 != nil {
		return v, fmt.Errorf("%w; cli fallback: %v", err, err2)
	}
	return v2, nil
}

// jobListReuse is how old a job list an inventory may reuse, and
// topologyTTL how long the switch topology is kept. Under a burst of
// dispatches the agent asks for an inventory after every change; listing
// every job (and forking scontrol) each time loads slurmctld and slows the
// submits themselves.
const (
	jobListReuse = 500 * time.Millisecond
	topologyTTL  = time.Minute
)

// listCall is one job listing that several callers may wait for.
type listCall struct {
	seq  uint64
	done chan struct{}
	jobs []JobInfo
	err  error
}

// listJobs reads Slurm's job list. Concurrent callers share listings: a
// caller needs a list read after it asked (Launch looks for a job that may
// have been submitted just before it took the dispatch's lock), so it joins
// a listing that started after it asked, or waits for the one in flight to
// end and then starts (or joins) the next. Under a burst of concurrent
// Launches, Cancels and polls, slurmctld is asked once per round instead of
// once per caller. The returned slice is shared: read it, never change it.
func (c *Connector) listJobs(ctx context.Context) ([]JobInfo, error) {
	c.mu.Lock()
	asked := c.listSeq
	for c.listing != nil {
		call := c.listing
		c.mu.Unlock()
		select {
		case <-call.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		// A listing that failed because its starter's context ended says
		// nothing about Slurm: read again.
		if call.seq > asked && (call.err == nil || !errors.Is(call.err, context.Canceled) && !errors.Is(call.err, context.DeadlineExceeded)) {
			return call.jobs, call.err
		}
		c.mu.Lock()
	}
	c.listSeq++
	call := &listCall{seq: c.listSeq, done: make(chan struct{})}
	c.listing = call
	c.mu.Unlock()
	call.jobs, call.err = read(c, ctx, "list jobs", func(b backend, ctx context.Context) ([]JobInfo, error) { return b.jobs(ctx) })
	c.mu.Lock()
	c.listing = nil
	if call.err == nil {
		c.lastJobs, c.lastJobsAt = call.jobs, time.Now()
	}
	c.mu.Unlock()
	close(call.done)
	return call.jobs, call.err
}

// recentJobs is the last job list when it is younger than jobListReuse.
func (c *Connector) recentJobs() ([]JobInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lastJobsAt.IsZero() || time.Since(c.lastJobsAt) > jobListReuse {
		return nil, false
	}
	return c.lastJobs, true
}

// topology returns the nodes' leaf switches, read again after topologyTTL;
// nil without the CLI or when it was never readable.
func (c *Connector) topology(ctx context.Context) map[string]string {
	if c.cli == nil {
		return nil
	}
	c.topoMu.Lock()
	defer c.topoMu.Unlock()
	c.mu.Lock()
	topo, at := c.topo, c.topoAt
	c.mu.Unlock()
	if topo != nil && time.Since(at) < topologyTTL {
		return topo
	}
	cctx, cancel := c.opCtx(ctx)
	leaf, err := c.cli.topology(cctx)
	cancel()
	if err != nil {
		c.log.Warn("slurm topology unavailable; nodes are advertised with the racks last read, if any", "err", err)
		return topo
	}
	c.mu.Lock()
	c.topo, c.topoAt = leaf, time.Now()
	c.mu.Unlock()
	return leaf
}

func (c *Connector) listNodes(ctx context.Context) ([]NodeInfo, error) {
	return read(c, ctx, "list nodes", func(b backend, ctx context.Context) ([]NodeInfo, error) { return b.nodes(ctx) })
}

// ---- Inventory --------------------------------------------------------------

// Inventory reads nodes and jobs (slurmrestd, else sinfo/squeue --json) and
// the switch topology (scontrol; without the CLI nodes have no rack). Nodes
// are always read afresh; a job list younger than jobListReuse and a
// topology younger than topologyTTL are reused.
func (c *Connector) Inventory(ctx context.Context) (*agent.Inventory, error) {
	nodes, err := c.listNodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("slurm inventory: %w", err)
	}
	jobs, ok := c.recentJobs()
	if !ok {
		if jobs, err = c.listJobs(ctx); err != nil {
			return nil, fmt.Errorf("slurm inventory: %w", err)
		}
	}
	leaf := c.topology(ctx)
	inv, sh, err := buildInventory(nodes, jobs, leaf, invOptions{partition: c.cfg.Partition, classOf: c.classOf, labels: c.cfg.Labels})
	if err != nil {
		return nil, fmt.Errorf("slurm inventory: %w", err)
	}
	c.mu.Lock()
	c.shape = &sh
	c.mu.Unlock()
	return inv, nil
}

func (c *Connector) classOf(gresType string) (string, int64) {
	if gresType == "" {
		return "", 0
	}
	t := strings.ToLower(gresType)
	class, mib := "nvidia-"+t, int64(0)
	if k, ok := knownClasses[t]; ok {
		class, mib = k.class, k.mib
	}
	if v, ok := c.cfg.Classes[gresType]; ok {
		class = v
	}
	if v, ok := c.cfg.GPUMemoryMiB[gresType]; ok {
		mib = v
	}
	return class, mib
}

// ---- Launch -----------------------------------------------------------------

// Launch submits d as one batch job unless a job for d's dispatch id exists
// already (in memory or in Slurm); see agent.Connector.
func (c *Connector) Launch(ctx context.Context, d *agentv1.Dispatch) error {
	if d == nil || d.GetDispatchId() == "" {
		return errors.New("slurm: dispatch_id is empty")
	}
	id := d.GetDispatchId()
	unlock, err := c.ids.lock(ctx, id)
	if err != nil {
		return fmt.Errorf("slurm: launch dispatch %s: %w", id, err)
	}
	defer unlock()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errors.New("slurm: connector is closed")
	}
	_, known := c.recs[id]
	rejected, wasRejected := c.rejected[id]
	sh := c.shape
	lookup := !c.synced || c.uncertain[id]
	c.mu.Unlock()
	if known {
		return nil
	}
	if wasRejected {
		// Slurm refused this dispatch before; asking again would only burn
		// another job id.
		return agent.Reject("slurm refused the job: %s", rejected)
	}
	// A redelivered dispatch after an agent restart, or after a submit
	// whose answer was lost: look in Slurm. Once a poll has adopted every
	// job of ours, memory is complete and the listing (which grows with
	// Slurm's queue) is skipped.
	if lookup {
		jobs, err := c.listJobs(ctx)
		if err != nil {
			return fmt.Errorf("slurm: look for an existing job of dispatch %s: %w", id, err)
		}
		for _, j := range jobs {
			if t, ok := c.ours(j); ok && t.DispatchID == id {
				c.mu.Lock()
				r := c.adopt(t, j)
				c.observe(r, j)
				delete(c.uncertain, id)
				c.mu.Unlock()
				c.log.Info("slurm dispatch already has a job; not submitting again", "dispatch_id", id, "job_id", j.ID)
				return nil
			}
		}
	}
	if sh == nil {
		if _, err := c.Inventory(ctx); err != nil {
			return fmt.Errorf("slurm: learn the cluster's shape before the first launch: %w", err)
		}
		c.mu.Lock()
		sh = c.shape
		c.mu.Unlock()
	}
	p, err := translate(d, shape{
		partition: c.cfg.Partition, workdir: c.cfg.Workdir, clusterID: c.cfg.ClusterID,
		gpusPerNode: sh.gpusPerNode, mpsPerGPU: sh.mpsPerGPU, shardsPerGPU: sh.shardsPerGPU,
		gresTypeOf: sh.gresTypeOf, hasMPS: sh.hasMPS, hasShard: sh.hasShard,
		canSwitches: c.cli != nil, switchesForTop: true,
		defaultPath: "/usr/local/bin:/usr/bin:/bin",
	})
	if err != nil {
		c.stats.Rejects.Add(1)
		c.log.Info("slurm dispatch rejected", "dispatch_id", id, "reason", err.Error())
		return agent.Reject("%v", err)
	}
	be := c.primary
	if (p.req.Switches > 0 || len(p.req.NodeList) > 0) && c.cli != nil {
		be = c.cli
	}
	cctx, cancel := c.opCtx(ctx)
	jobID, err := submitTraced(cctx, be, id, p.req)
	cancel()
	if err != nil {
		if reason, ok := RejectReason(err); ok {
			c.mu.Lock()
			c.rejected[id] = reason
			c.mu.Unlock()
			c.stats.Rejects.Add(1)
			c.log.Info("slurm refused the job; dispatch rejected", "dispatch_id", id, "reason", reason)
			return agent.Reject("slurm refused the job: %s", reason)
		}
		c.stats.SubmitErrors.Add(1)
		c.mu.Lock()
		c.uncertain[id] = true
		c.mu.Unlock()
		c.log.Warn("slurm submit failed; the agent will retry", "dispatch_id", id, "err", err)
		return fmt.Errorf("slurm: submit dispatch %s: %w", id, err)
	}
	c.stats.Submits.Add(1)
	wid := d.GetWorkloadId()
	if wid == "" {
		wid = d.GetWorkload().GetId()
	}
	c.mu.Lock()
	delete(c.uncertain, id)
	if _, dup := c.recs[id]; !dup { // a poll may have seen it already
		c.recs[id] = &record{dispatchID: id, workloadID: wid, jobID: jobID, state: agent.StatePending, submitted: c.now(), gpuMilli: p.gpuMilli}
	}
	c.mu.Unlock()
	c.log.Info("slurm job submitted", "dispatch_id", id, "job_id", jobID, "backend", be.name(), "gres", p.req.Gres, "nodes", p.req.Nodes)
	return nil
}

// ours reports whether the connector submitted j (its comment carries our
// prefix and, when configured, our cluster id).
func (c *Connector) ours(j JobInfo) (JobTag, bool) {
	t, ok := ParseComment(j.Comment)
	if !ok {
		return t, false
	}
	if c.cfg.ClusterID != "" && t.ClusterID != c.cfg.ClusterID {
		return t, false
	}
	return t, true
}

// adopt returns the record of t's dispatch, creating it from j; c.mu held.
func (c *Connector) adopt(t JobTag, j JobInfo) *record {
	r := c.recs[t.DispatchID]
	if r == nil {
		r = &record{dispatchID: t.DispatchID, workloadID: t.WorkloadID, jobID: j.ID, state: agent.StatePending, submitted: j.Submit,
			gpuMilli: gpuMilliOfJob(j, c.mpsPerGPULocked(), c.shardsPerGPULocked())}
		c.recs[t.DispatchID] = r
	}
	return r
}

func (c *Connector) mpsPerGPULocked() int64 {
	if c.shape != nil && c.shape.mpsPerGPU > 0 {
		return c.shape.mpsPerGPU
	}
	return 100
}

func (c *Connector) shardsPerGPULocked() int64 {
	if c.shape != nil && c.shape.shardsPerGPU > 0 {
		return c.shape.shardsPerGPU
	}
	return 4
}

// ---- Cancel -----------------------------------------------------------------

// Cancel asks Slurm to stop the dispatch's job; a job that is unknown or
// already finished is not an error. See agent.Connector.
func (c *Connector) Cancel(ctx context.Context, dispatchID string, preempt bool) error {
	// A Launch of the same id in flight finishes first, so its job is
	// known (and cancelled) rather than submitted after the cancel.
	unlock, err := c.ids.lock(ctx, dispatchID)
	if err != nil {
		return fmt.Errorf("slurm: cancel %s: %w", dispatchID, err)
	}
	defer unlock()
	c.mu.Lock()
	r := c.recs[dispatchID]
	c.mu.Unlock()
	if r == nil {
		// Maybe a job from before an agent restart.
		if err := c.refresh(ctx); err != nil {
			return fmt.Errorf("slurm: cancel %s: look up its job: %w", dispatchID, err)
		}
		c.mu.Lock()
		r = c.recs[dispatchID]
		c.mu.Unlock()
		if r == nil {
			return nil
		}
	}
	c.mu.Lock()
	if r.state.Terminal() {
		c.mu.Unlock()
		return nil
	}
	r.preempt = r.preempt || preempt
	jobID := r.jobID
	c.mu.Unlock()
	cctx, cancel := c.opCtx(ctx)
	err = c.primary.cancel(cctx, jobID)
	cancel()
	if err != nil && !IsJobGone(err) && c.cli != nil && c.primary != backend(c.cli) {
		c.log.Warn("slurm REST cancel failed; using scancel", "dispatch_id", dispatchID, "job_id", jobID, "err", err)
		c.stats.Fallbacks.Add(1)
		cctx, cancel := c.opCtx(ctx)
		err = c.cli.cancel(cctx, jobID)
		cancel()
	}
	if err != nil && !IsJobGone(err) {
		return fmt.Errorf("slurm: cancel dispatch %s (job %d): %w", dispatchID, jobID, err)
	}
	c.log.Info("slurm job cancel requested", "dispatch_id", dispatchID, "job_id", jobID, "preempt", preempt)
	return nil
}

// ---- List and status polling ------------------------------------------------

// List returns every dispatch the connector knows, rebuilt from Slurm's
// job list (finished jobs stay until RetainFinished, even after Slurm has
// forgotten them).
func (c *Connector) List(ctx context.Context) ([]agent.WorkStatus, error) {
	if err := c.refresh(ctx); err != nil {
		return nil, fmt.Errorf("slurm list: %w", err)
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]agent.WorkStatus, 0, len(c.recs))
	for _, r := range c.recs {
		ws := agent.WorkStatus{DispatchID: r.dispatchID, WorkloadID: r.workloadID, State: r.state, Nodes: append([]string(nil), r.nodes...),
			StartedAt: r.started, FinishedAt: r.finished, ExitCode: r.exit, Reason: r.reason, GPUMilliSeconds: r.usage(now)}
		out = append(out, ws)
	}
	sortStatuses(out)
	return out, nil
}

func sortStatuses(s []agent.WorkStatus) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].DispatchID < s[j-1].DispatchID; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

func (r *record) usage(now time.Time) int64 {
	if r.started.IsZero() {
		return 0
	}
	end := now
	if !r.finished.IsZero() {
		end = r.finished
	}
	d := end.Sub(r.started)
	if d < 0 {
		return 0
	}
	return r.gpuMilli * d.Milliseconds() / 1000
}

func (c *Connector) pollLoop() {
	defer close(c.done)
	wait := c.cfg.PollInterval
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-c.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		err := c.refresh(ctx)
		cancel()
		if err != nil {
			c.stats.PollErrors.Add(1)
			wait = min(wait*2, 30*time.Second)
			c.log.Warn("slurm job poll failed; backing off", "err", err, "next_in", wait)
		} else {
			wait = c.cfg.PollInterval
		}
		t.Reset(wait)
	}
}

// refresh reads Slurm's job list and turns changes of our jobs into events.
func (c *Connector) refresh(ctx context.Context) error {
	c.pollMu.Lock()
	defer c.pollMu.Unlock()
	jobs, err := c.listJobs(ctx)
	if err != nil {
		return err
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[string]bool{}
	for _, j := range jobs {
		t, ok := c.ours(j)
		if _, rej := c.rejected[t.DispatchID]; !ok || rej {
			continue
		}
		r := c.adopt(t, j)
		if r.jobID != j.ID {
			// A second job for one dispatch should never exist; the first
			// one is the dispatch's, the other is left alone.
			continue
		}
		seen[t.DispatchID] = true
		delete(c.uncertain, t.DispatchID)
		c.observe(r, j)
	}
	c.synced = true
	for id, r := range c.recs {
		if r.state.Terminal() {
			if !r.finished.IsZero() && now.Sub(r.finished) > c.cfg.RetainFinished {
				delete(c.recs, id)
			}
			continue
		}
		if seen[id] {
			r.missing = 0
			continue
		}
		r.missing++
		// Three misses in a row, and never within 10 s of the submit (a
		// fresh job always shows at once, but be safe about listings that
		// were fetched just before it).
		if r.missing >= 3 && now.Sub(r.submitted) > 10*time.Second {
			c.finish(r, agent.StateFailed, nil, fmt.Sprintf("slurm job %d vanished before its end was seen (MinJobAge passed or slurmctld lost its state)", r.jobID), now)
		}
	}
	return nil
}

// observe applies one sighting of r's job; c.mu held.
func (c *Connector) observe(r *record, j JobInfo) {
	if r.emittedTerminal {
		return
	}
	if names, err := ExpandHostlist(j.Nodes); err == nil && len(names) > 0 {
		r.nodes = names
	}
	// A job ran when it got nodes and a start time; a job cancelled or
	// refused while pending has a start time but no nodes.
	if !j.Start.IsZero() && j.Nodes != "" && j.State != "PENDING" {
		r.started = j.Start
	}
	out := MapJobState(j.State, j.ExitCode, j.Reason, r.preempt)
	switch {
	case out.State == agent.StatePending:
		r.state = agent.StatePending
	case out.State == agent.StateRunning:
		r.state = agent.StateRunning
		if !r.emittedRunning {
			r.emittedRunning = true
			c.emit(r, r.started)
		}
	case out.State.Terminal():
		end := j.End
		if end.IsZero() {
			end = c.now()
		}
		c.finish(r, out.State, out.ExitCode, out.Reason, end)
	default:
		c.log.Warn("slurm job in a state the connector does not know", "dispatch_id", r.dispatchID, "job_id", j.ID, "state", j.State)
	}
}

// finish records a terminal state and emits it (with Running first when the
// job ran between two polls); c.mu held.
func (c *Connector) finish(r *record, st agent.WorkState, exit *int32, reason string, at time.Time) {
	if r.emittedTerminal {
		return
	}
	if !r.emittedRunning && !r.started.IsZero() {
		r.emittedRunning = true
		r.state = agent.StateRunning
		c.emit(r, r.started)
	}
	r.state, r.exit, r.reason, r.finished = st, exit, reason, at
	r.emittedTerminal = true
	c.emit(r, at)
	c.log.Info("slurm job finished", "dispatch_id", r.dispatchID, "job_id", r.jobID, "state", st.String(), "reason", reason)
}

// emit queues an event for r's current state; c.mu held.
func (c *Connector) emit(r *record, at time.Time) {
	ev := agent.WorkEvent{DispatchID: r.dispatchID, WorkloadID: r.workloadID, State: r.state, Time: at, Reason: r.reason}
	if r.state.Terminal() {
		ev.ExitCode = r.exit
		ev.GPUMilliSeconds = r.usage(at)
		if !r.started.IsZero() {
			ev.WallTime = at.Sub(r.started)
		}
	}
	c.events.Push(ev)
}
