package slurm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/internal/repo"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// These tests run against real Slurm daemons started by scripts/slurm-up.sh.
// They skip, loudly, when not root or when the script fails, unless
// MERIDIAN_REQUIRE_SLURM=1, in which case they fail.

type slurmEnv struct {
	vars map[string]string
}

var (
	slurmOnce sync.Once
	slurmInfo *slurmEnv
	slurmErr  error
	testSeq   atomic.Int64
)

func needSlurm(t *testing.T) *slurmEnv {
	t.Helper()
	if testing.Short() {
		skipOrFail(t, "-short: not starting Slurm daemons")
	}
	if os.Geteuid() != 0 {
		skipOrFail(t, "not root: the local Slurm cluster (scripts/slurm-up.sh) needs root")
	}
	slurmOnce.Do(func() {
		root, err := repo.Root()
		if err != nil {
			slurmErr = err
			return
		}
		// Other packages (internal/e2e/slurmhub) use the same cluster and
		// may run at the same time under go test ./...: take the shared
		// lock, held until this test binary exits.
		if err := lockSlurmTests(10 * time.Minute); err != nil {
			slurmErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "slurm-up.sh"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			slurmErr = fmt.Errorf("scripts/slurm-up.sh: %w\n%s", err, out)
			return
		}
		dir := os.Getenv("MERIDIAN_SLURM_DIR")
		if dir == "" {
			home, _ := os.UserHomeDir()
			dir = filepath.Join(home, ".cache", "meridian", "slurm")
		}
		vars, err := LoadEnvFile(filepath.Join(dir, "env"))
		if err != nil {
			slurmErr = err
			return
		}
		slurmInfo = &slurmEnv{vars: vars}
	})
	if slurmErr != nil {
		skipOrFail(t, "Slurm is not available: "+slurmErr.Error())
	}
	return slurmInfo
}

// lockSlurmTests takes the flock on "$MERIDIAN_SLURM_DIR/tests.lock" that
// every package's real-Slurm tests hold (internal/e2e/slurmhub.Lock is the
// same lock; that package imports this one, so the few lines are repeated).
func lockSlurmTests(limit time.Duration) error {
	dir := os.Getenv("MERIDIAN_SLURM_DIR")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "meridian", "slurm")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("slurm test lock: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "tests.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("slurm test lock: %w", err)
	}
	deadline := time.Now().Add(limit)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			slurmLock = f // kept open: the lock lasts until the process exits
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			return fmt.Errorf("slurm test lock: another package's Slurm tests held it for %s: %w", limit, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

var slurmLock *os.File

func skipOrFail(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("MERIDIAN_REQUIRE_SLURM") == "1" {
		t.Fatalf("MERIDIAN_REQUIRE_SLURM=1 and %s", msg)
	}
	t.Skipf("SKIPPING real-Slurm test: %s (set MERIDIAN_REQUIRE_SLURM=1 to make this a failure)", msg)
}

type connOpt func(*Config)

func cliOnly(c *Config)  { c.RESTURL = ""; b := true; c.CLI = &b }
func restOnly(c *Config) { b := false; c.CLI = &b }

// newTestConnector gives each test its own cluster id, so it sees only the
// jobs it submitted.
func (e *slurmEnv) connector(t *testing.T, opts ...connOpt) *Connector {
	t.Helper()
	cfg := Config{
		RESTURL:      e.vars["MERIDIAN_SLURM_REST_URL"],
		User:         e.vars["MERIDIAN_SLURM_USER"],
		JWTKeyFile:   e.vars["MERIDIAN_SLURM_JWT_KEY"],
		SlurmConf:    e.vars["SLURM_CONF"],
		Partition:    e.vars["MERIDIAN_SLURM_PARTITION"],
		ClusterID:    fmt.Sprintf("t%d-%d", os.Getpid(), testSeq.Add(1)),
		Labels:       map[string]string{"env": "test"},
		PollInterval: 200 * time.Millisecond,
		Workdir:      t.TempDir(),
	}
	for _, o := range opts {
		o(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func (e *slurmEnv) scontrol(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command("scontrol", args...)
	cmd.Env = append(os.Environ(), "SLURM_CONF="+e.vars["SLURM_CONF"])
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scontrol %v: %v\n%s", args, err, out)
	}
}

// waitIdle waits until no job holds any GPU, so inventory counts are exact.
func waitIdle(t *testing.T, c *Connector) *agent.Inventory {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		inv, err := c.Inventory(context.Background())
		if err != nil {
			t.Fatalf("Inventory: %v", err)
		}
		if freeGPUs(inv) == 32 || time.Now().After(deadline) {
			return inv
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func freeGPUs(inv *agent.Inventory) int {
	n := 0
	for _, node := range inv.Nodes {
		for _, g := range node.Gpus {
			if g.FreeMilli == 1000 {
				n++
			}
		}
	}
	return n
}

// waitFor reads events until one for id reaches state (or a terminal one).
func waitFor(t *testing.T, c *Connector, id string, want agent.WorkState, timeout time.Duration) agent.WorkEvent {
	t.Helper()
	tm := time.NewTimer(timeout)
	defer tm.Stop()
	for {
		select {
		case ev := <-c.Events():
			if ev.DispatchID != id {
				continue
			}
			if ev.State == want {
				return ev
			}
			if ev.State.Terminal() {
				t.Fatalf("dispatch %s ended %v (exit %v, %s), want %v", id, ev.State, fmtp(ev.ExitCode), ev.Reason, want)
			}
		case <-tm.C:
			t.Fatalf("dispatch %s: no %v event within %v", id, want, timeout)
		}
	}
}

// waitForEach waits for a want event of each of ids, in any order, and
// fails on another terminal event of one of them.
func waitForEach(t *testing.T, c *Connector, want agent.WorkState, timeout time.Duration, ids ...string) map[string]agent.WorkEvent {
	t.Helper()
	tm := time.NewTimer(timeout)
	defer tm.Stop()
	got := map[string]agent.WorkEvent{}
	for len(got) < len(ids) {
		select {
		case ev := <-c.Events():
			if !slices.Contains(ids, ev.DispatchID) {
				continue
			}
			if ev.State == want {
				got[ev.DispatchID] = ev
			} else if ev.State.Terminal() {
				t.Fatalf("dispatch %s ended %v (exit %v, %s), want %v", ev.DispatchID, ev.State, fmtp(ev.ExitCode), ev.Reason, want)
			}
		case <-tm.C:
			t.Fatalf("no %v event within %v for each of %v (got %d)", want, timeout, ids, len(got))
		}
	}
	return got
}

func script(body string) string { return "#!/bin/bash\nset -e\n" + body + "\n" }

// waitRelease is a script fragment that holds the job until the test
// creates the file "release" in the job's working directory (at most 60 s),
// so the test can look at the cluster while the job surely runs.
const waitRelease = `for i in $(seq 1 600); do [ -e release ] && exit 0; sleep 0.1; done; exit 9`

func release(t *testing.T, c *Connector) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(c.cfg.Workdir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSlurmInventory(t *testing.T) {
	e := needSlurm(t)
	for name, opt := range map[string]connOpt{"rest": restOnly, "cli": cliOnly} {
		t.Run(name, func(t *testing.T) {
			c := e.connector(t, opt)
			inv := waitIdle(t, c)
			if len(inv.Nodes) != 4 {
				t.Fatalf("%d nodes, want 4", len(inv.Nodes))
			}
			total := 0
			wantRack := map[string]string{"gpu1": "leaf1", "gpu2": "leaf1", "gpu3": "leaf2", "gpu4": "leaf2"}
			for i, n := range inv.Nodes {
				if want := fmt.Sprintf("gpu%d", i+1); n.Name != want {
					t.Errorf("node %d is %s, want %s", i, n.Name, want)
				}
				total += len(n.Gpus)
				if n.AcceleratorClass != "nvidia-h100-80gb" || !n.Schedulable {
					t.Errorf("%s: class %q schedulable %v", n.Name, n.AcceleratorClass, n.Schedulable)
				}
				// Topology comes from scontrol: REST-only mode has none.
				if wantR := wantRack[n.Name]; name == "cli" && (n.Rack != wantR || n.NvlinkDomain != wantR) {
					t.Errorf("%s: rack %q nvlink %q, want %q", n.Name, n.Rack, n.NvlinkDomain, wantR)
				}
				leafFeature := "leaf1"
				if n.Name == "gpu3" || n.Name == "gpu4" {
					leafFeature = "leaf2"
				}
				for _, f := range []string{"h100", "nvlink", leafFeature} {
					if n.Labels[FeaturePrefix+f] != "true" {
						t.Errorf("%s lacks feature %s: %v", n.Name, f, n.Labels)
					}
				}
				if n.Labels[LabelShards] != "32" || n.Labels[LabelMPS] != "800" {
					t.Errorf("%s: shard/mps labels %v", n.Name, n.Labels)
				}
			}
			if total != 32 || freeGPUs(inv) != 32 {
				t.Fatalf("%d GPUs, %d free; want 32 and 32", total, freeGPUs(inv))
			}
			if len(inv.FractionalModes) != 2 || inv.Labels["env"] != "test" || inv.Labels[LabelConnector] != "slurm" {
				t.Fatalf("modes %v labels %v", inv.FractionalModes, inv.Labels)
			}
		})
	}
	// The REST connector with the CLI available reads topology too.
	c := e.connector(t)
	inv, err := c.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range inv.Nodes {
		if n.Rack == "" {
			t.Errorf("%s: no rack with REST + CLI", n.Name)
		}
	}
}

func TestSlurmDrainShowsInNextInventory(t *testing.T) {
	e := needSlurm(t)
	c := e.connector(t)
	e.scontrol(t, "update", "nodename=gpu4", "state=drain", "reason=meridian-drain-test")
	t.Cleanup(func() {
		// Resume whatever state the test left; "already resumed" is fine.
		cmd := exec.Command("scontrol", "update", "nodename=gpu4", "state=resume")
		cmd.Env = append(os.Environ(), "SLURM_CONF="+e.vars["SLURM_CONF"])
		_ = cmd.Run()
	})
	inv, err := c.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range inv.Nodes {
		if n.Name == "gpu4" {
			if n.Schedulable || n.Labels[LabelReason] != "meridian-drain-test" || !strings.Contains(n.Labels[LabelState], "drain") {
				t.Fatalf("drained gpu4 advertised as %+v", n)
			}
		} else if !n.Schedulable {
			t.Fatalf("%s not schedulable", n.Name)
		}
	}
	// A node set down offers nothing at all.
	e.scontrol(t, "update", "nodename=gpu3", "state=down", "reason=meridian-down-test")
	t.Cleanup(func() {
		cmd := exec.Command("scontrol", "update", "nodename=gpu3", "state=resume")
		cmd.Env = append(os.Environ(), "SLURM_CONF="+e.vars["SLURM_CONF"])
		_ = cmd.Run()
	})
	inv, err = c.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n := inv.Nodes[2]; n.Name != "gpu3" || n.Schedulable || n.Gpus[0].Healthy || n.CpuMilliFree != 0 {
		t.Fatalf("down gpu3 advertised as %+v", n)
	}
	if got := freeGPUs(inv); got != 24 {
		t.Fatalf("%d whole GPUs free with gpu3 down and gpu4 drained; want 24 (the drained node's GPUs stay free, only unschedulable)", got)
	}
	e.scontrol(t, "update", "nodename=gpu3,gpu4", "state=resume")
	// slurmctld marks a resumed node not responding until its next ping
	// (about a second).
	deadline := time.Now().Add(30 * time.Second)
	for {
		inv, err = c.Inventory(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if inv.Nodes[2].Schedulable && inv.Nodes[3].Schedulable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("resumed gpu3/gpu4 still not schedulable: %+v %+v", inv.Nodes[2], inv.Nodes[3])
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func TestSlurmGangRunsAndCompletes(t *testing.T) {
	e := needSlurm(t)
	c := e.connector(t)
	waitIdle(t, c)
	d := newDispatch(fmt.Sprintf("gang-%d", time.Now().UnixNano())).Replicas(2).Milli(8000).Class("nvidia-h100-80gb").
		Topology(meridianv1.Topology_TOPOLOGY_RACK).Script(script(`[ "$SLURM_JOB_NUM_NODES" = 2 ]; [ -n "$CUDA_VISIBLE_DEVICES" ]; ` + waitRelease)).Obj()
	if err := c.Launch(context.Background(), d); err != nil {
		t.Fatalf("Launch: %v", err)
	}
	ev := waitFor(t, c, d.DispatchId, agent.StateRunning, 30*time.Second)
	if ev.WorkloadID != d.WorkloadId {
		t.Errorf("workload id %q", ev.WorkloadID)
	}
	inv, err := c.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := freeGPUs(inv); got != 16 {
		t.Errorf("%d free GPUs while the 2x8 gang runs, want 16", got)
	}
	list, err := c.List(context.Background())
	if err != nil || len(list) != 1 {
		t.Fatalf("List = %v, %v", list, err)
	}
	nodes := list[0].Nodes
	if len(nodes) != 2 || rackOf(nodes[0]) != rackOf(nodes[1]) {
		t.Errorf("gang on %v, want 2 nodes under one leaf switch", nodes)
	}
	// Slurm's times have whole seconds: let the job run past one.
	time.Sleep(1100 * time.Millisecond)
	release(t, c)
	ev = waitFor(t, c, d.DispatchId, agent.StateSucceeded, 60*time.Second)
	if ev.ExitCode == nil || *ev.ExitCode != 0 || ev.WallTime < time.Second || ev.GPUMilliSeconds != 16000*ev.WallTime.Milliseconds()/1000 {
		t.Fatalf("succeeded event %+v, want exit 0, wall time >= 1s and 16 GPUs x wall time", ev)
	}
}

// An elastic dispatch runs at the size the hub admitted, not at its
// largest: 2 of 1..4 replicas of 8 GPUs are 2 nodes and 16 GPUs, although
// all 4 would fit.
func TestSlurmElasticRunsAtAdmittedSize(t *testing.T) {
	e := needSlurm(t)
	c := e.connector(t)
	waitIdle(t, c)
	d := newDispatch(fmt.Sprintf("elastic-%d", time.Now().UnixNano())).Replicas(4).Min(1).Milli(8000).Admitted(2).
		Script(script(`[ "$SLURM_JOB_NUM_NODES" = 2 ]; ` + waitRelease)).Obj()
	if err := c.Launch(context.Background(), d); err != nil {
		t.Fatalf("Launch: %v", err)
	}
	waitFor(t, c, d.DispatchId, agent.StateRunning, 30*time.Second)
	inv, err := c.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := freeGPUs(inv); got != 16 {
		t.Errorf("%d free GPUs while 2 of 4 elastic replicas run, want 16", got)
	}
	list, err := c.List(context.Background())
	if err != nil || len(list) != 1 || len(list[0].Nodes) != 2 {
		t.Fatalf("List = %+v, %v; want one job on 2 nodes", list, err)
	}
	time.Sleep(1100 * time.Millisecond)
	release(t, c)
	ev := waitFor(t, c, d.DispatchId, agent.StateSucceeded, 60*time.Second)
	if ev.ExitCode == nil || *ev.ExitCode != 0 || ev.GPUMilliSeconds != 16000*ev.WallTime.Milliseconds()/1000 {
		t.Fatalf("succeeded event %+v, want exit 0 (2 nodes) and 16 GPUs x wall time", ev)
	}
}

func rackOf(n string) string {
	if n == "gpu1" || n == "gpu2" {
		return "leaf1"
	}
	return "leaf2"
}

func TestSlurmExitCode3IsFailed(t *testing.T) {
	e := needSlurm(t)
	for name, opt := range map[string]connOpt{"rest": restOnly, "cli": cliOnly} {
		t.Run(name, func(t *testing.T) {
			c := e.connector(t, opt)
			d := newDispatch(fmt.Sprintf("exit3-%s-%d", name, time.Now().UnixNano())).Script("#!/bin/bash\nexit 3\n").Obj()
			if err := c.Launch(context.Background(), d); err != nil {
				t.Fatalf("Launch: %v", err)
			}
			killed := newDispatch(fmt.Sprintf("kill9-%s-%d", name, time.Now().UnixNano())).Script("#!/bin/bash\nkill -KILL $$\n").Obj()
			if err := c.Launch(context.Background(), killed); err != nil {
				t.Fatalf("Launch: %v", err)
			}
			// The two jobs end together, in either order: wait for both
			// (waiting for one at a time dropped the other's event when
			// it came first).
			evs := waitForEach(t, c, agent.StateFailed, 60*time.Second, d.DispatchId, killed.DispatchId)
			ev := evs[d.DispatchId]
			if ev.ExitCode == nil || *ev.ExitCode != 3 || !strings.Contains(ev.Reason, "exit code 3") {
				t.Fatalf("failed event %+v (exit %v)", ev, fmtp(ev.ExitCode))
			}
			ev = evs[killed.DispatchId]
			if ev.ExitCode == nil || *ev.ExitCode != 137 || !strings.Contains(ev.Reason, "signal 9") {
				t.Fatalf("killed job: event %+v (exit %v), want exit 137 by signal 9", ev, fmtp(ev.ExitCode))
			}
			list, err := c.List(context.Background())
			if err != nil || len(list) != 2 || list[0].State != agent.StateFailed || *list[0].ExitCode != 3 {
				t.Fatalf("List = %+v, %v", list, err)
			}
		})
	}
}

func TestSlurmMPSFractionalJob(t *testing.T) {
	e := needSlurm(t)
	c := e.connector(t)
	waitIdle(t, c)
	d := newDispatch(fmt.Sprintf("mps-%d", time.Now().UnixNano())).Milli(500).Mode(meridianv1.FractionalMode_FRACTIONAL_MODE_MPS).
		Script(script(`[ -n "$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" ]; ` + waitRelease)).Obj()
	if err := c.Launch(context.Background(), d); err != nil {
		t.Fatalf("Launch: %v", err)
	}
	waitFor(t, c, d.DispatchId, agent.StateRunning, 30*time.Second)
	inv, err := c.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	halves := 0
	for _, n := range inv.Nodes {
		for _, g := range n.Gpus {
			if g.FreeMilli == 500 {
				halves++
			}
		}
	}
	if halves != 1 || freeGPUs(inv) != 31 {
		t.Errorf("while mps:50 runs: %d half-free GPUs (want 1), %d whole free (want 31)", halves, freeGPUs(inv))
	}
	release(t, c)
	ev := waitFor(t, c, d.DispatchId, agent.StateSucceeded, 60*time.Second)
	if ev.ExitCode == nil || *ev.ExitCode != 0 {
		t.Fatalf("mps job: %+v", ev)
	}
}

func TestSlurmSameDispatchTwiceIsOneJob(t *testing.T) {
	e := needSlurm(t)
	c := e.connector(t)
	d := newDispatch(fmt.Sprintf("twice-%d", time.Now().UnixNano())).Script(script("sleep 1")).Obj()
	for i := 0; i < 2; i++ {
		if err := c.Launch(context.Background(), d); err != nil {
			t.Fatalf("Launch %d: %v", i, err)
		}
	}
	// A restarted agent (a new connector with the same cluster id) gets the
	// dispatch redelivered: it must find the job, not submit another.
	c2, err := New(c.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := c2.Launch(context.Background(), d); err != nil {
		t.Fatalf("Launch after restart: %v", err)
	}
	if got := c.Counters().Submits.Load() + c2.Counters().Submits.Load(); got != 1 {
		t.Fatalf("%d submits, want 1", got)
	}
	jobs, err := c.listJobs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, j := range jobs {
		if tag, ok := c.ours(j); ok && tag.DispatchID == d.DispatchId {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d Slurm jobs carry dispatch %s, want 1", n, d.DispatchId)
	}
	list, err := c2.List(context.Background())
	if err != nil || len(list) != 1 || list[0].DispatchID != d.DispatchId {
		t.Fatalf("restarted List = %+v, %v", list, err)
	}
	waitFor(t, c, d.DispatchId, agent.StateSucceeded, 60*time.Second)
}

func TestSlurmCancelAndPreempt(t *testing.T) {
	e := needSlurm(t)
	for name, tc := range map[string]struct {
		opt     connOpt
		preempt bool
		want    agent.WorkState
	}{
		"rest cancel":  {opt: restOnly, want: agent.StateCancelled},
		"cli cancel":   {opt: cliOnly, want: agent.StateCancelled},
		"rest preempt": {opt: restOnly, preempt: true, want: agent.StatePreempted},
	} {
		t.Run(name, func(t *testing.T) {
			c := e.connector(t, tc.opt)
			d := newDispatch(fmt.Sprintf("cancel-%d", time.Now().UnixNano())).Script(script("sleep 300")).Obj()
			if err := c.Launch(context.Background(), d); err != nil {
				t.Fatalf("Launch: %v", err)
			}
			waitFor(t, c, d.DispatchId, agent.StateRunning, 30*time.Second)
			if err := c.Cancel(context.Background(), d.DispatchId, tc.preempt); err != nil {
				t.Fatalf("Cancel: %v", err)
			}
			waitFor(t, c, d.DispatchId, tc.want, 30*time.Second)
			// Cancelling again, or something unknown, is not an error.
			if err := c.Cancel(context.Background(), d.DispatchId, tc.preempt); err != nil {
				t.Fatalf("second Cancel: %v", err)
			}
			if err := c.Cancel(context.Background(), "never-launched", false); err != nil {
				t.Fatalf("Cancel of an unknown dispatch: %v", err)
			}
		})
	}
	// A job Slurm no longer knows: the backend says "gone", not an error.
	c := e.connector(t)
	err := c.rest.cancel(context.Background(), 999999)
	if err == nil || !IsJobGone(err) {
		t.Fatalf("REST DELETE of an unknown job = %v, want a gone error", err)
	}
}

func TestSlurmRejectsAndRetries(t *testing.T) {
	e := needSlurm(t)
	c := e.connector(t)
	tests := map[string]*agentv1.Dispatch{
		"bad constraint":          newDispatch(fmt.Sprintf("badc-%d", time.Now().UnixNano())).Extra(ExtraConstraint, "no-such-feature").Obj(),
		"more GPUs than any node": newDispatch(fmt.Sprintf("big-%d", time.Now().UnixNano())).Replicas(5).Milli(8000).Obj(),
		"bad partition":           newDispatch(fmt.Sprintf("badp-%d", time.Now().UnixNano())).Extra(ExtraPartition, "nosuch").Obj(),
	}
	// slurmrestd v0.0.38 may keep an impossible request as a job that
	// pends forever (reason PartitionNodeLimit); cancel what this test left.
	t.Cleanup(func() {
		jobs, err := c.listJobs(context.Background())
		if err != nil {
			return
		}
		for _, j := range jobs {
			if _, ok := c.ours(j); ok && (j.State == "PENDING" || j.State == "RUNNING") {
				_ = c.cli.cancel(context.Background(), j.ID)
			}
		}
	})
	for name, d := range tests {
		t.Run(name, func(t *testing.T) {
			err := c.Launch(context.Background(), d)
			if !agent.IsRejected(err) {
				t.Fatalf("Launch = %v, want a rejection", err)
			}
			t.Logf("rejected: %s", agent.RejectReason(err))
			// Redelivery is rejected again, not adopted as an accepted job,
			// and nothing more is submitted.
			if err := c.Launch(context.Background(), d); !agent.IsRejected(err) {
				t.Fatalf("second Launch = %v, want a rejection", err)
			}
			jobs, err := c.listJobs(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, j := range jobs {
				if tag, ok := c.ours(j); ok && tag.DispatchID == d.DispatchId {
					n++
				}
			}
			if n > 1 {
				t.Fatalf("%d Slurm jobs for a rejected dispatch, want at most 1", n)
			}
		})
	}
	// A bad token is a fault to retry, not a rejection.
	bad := e.connector(t, restOnly, func(cfg *Config) { cfg.Token = "not-a-token" })
	err := bad.Launch(context.Background(), newDispatch("badtoken").Obj())
	if err == nil || agent.IsRejected(err) {
		t.Fatalf("Launch with a bad token = %v, want a retryable error", err)
	}
	// slurmrestd unreachable, no CLI: retryable too.
	down := e.connector(t, restOnly, func(cfg *Config) { cfg.RESTURL = "http://127.0.0.1:1" })
	if _, err := down.Inventory(context.Background()); err == nil {
		t.Fatal("Inventory against a dead slurmrestd succeeded")
	}
	if err := down.Launch(context.Background(), newDispatch("down").Obj()); err == nil || agent.IsRejected(err) {
		t.Fatalf("Launch against a dead slurmrestd = %v, want a retryable error", err)
	}
	// With the CLI, reads fall back to it.
	fb := e.connector(t, func(cfg *Config) { cfg.RESTURL = "http://127.0.0.1:1" })
	if _, err := fb.Inventory(context.Background()); err != nil {
		t.Fatalf("Inventory with the CLI fallback: %v", err)
	}
	if fb.Counters().Fallbacks.Load() == 0 {
		t.Fatal("no fallback counted")
	}
}

func TestSlurmForeignJobsUntouched(t *testing.T) {
	e := needSlurm(t)
	c := e.connector(t)
	cmd := exec.Command("sbatch", "--parsable", "--job-name=not-meridian", "--comment=hand-made", "--chdir="+t.TempDir(), "--wrap=sleep 20")
	cmd.Env = append(os.Environ(), "SLURM_CONF="+e.vars["SLURM_CONF"])
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sbatch: %v", err)
	}
	jobID := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		c := exec.Command("scancel", jobID)
		c.Env = cmd.Env
		_ = c.Run()
	})
	list, err := c.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Fatalf("List shows jobs the hub did not start: %+v", list)
	}
	// Another agent's job (a different cluster id) is not ours either.
	other := e.connector(t)
	d := newDispatch(fmt.Sprintf("other-%d", time.Now().UnixNano())).Script(script("sleep 1")).Obj()
	if err := other.Launch(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(context.Background(), d.DispatchId, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, other, d.DispatchId, agent.StateSucceeded, 60*time.Second)
	if list, _ := c.List(context.Background()); len(list) != 0 {
		t.Fatalf("List shows another agent's job: %+v", list)
	}
}

func TestSlurmCancelWhilePending(t *testing.T) {
	e := needSlurm(t)
	c := e.connector(t)
	waitIdle(t, c)
	blocker := newDispatch(fmt.Sprintf("blocker-%d", time.Now().UnixNano())).Script(script(waitRelease)).Obj()
	if err := c.Launch(context.Background(), blocker); err != nil {
		t.Fatal(err)
	}
	waitFor(t, c, blocker.DispatchId, agent.StateRunning, 30*time.Second)
	// All 32 GPUs cannot be had while the blocker holds one: it pends.
	big := newDispatch(fmt.Sprintf("big-%d", time.Now().UnixNano())).Replicas(4).Milli(8000).Script(script("true")).Obj()
	if err := c.Launch(context.Background(), big); err != nil {
		t.Fatal(err)
	}
	list, err := c.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range list {
		if w.DispatchID == big.DispatchId && w.State != agent.StatePending {
			t.Fatalf("big gang is %v, want Pending", w.State)
		}
	}
	if err := c.Cancel(context.Background(), big.DispatchId, false); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(30 * time.Second)
	for done := false; !done; {
		select {
		case ev := <-c.Events():
			if ev.DispatchID != big.DispatchId {
				continue
			}
			if ev.State != agent.StateCancelled {
				t.Fatalf("pending job cancelled: got %v first, want Cancelled without Running", ev.State)
			}
			if ev.WallTime != 0 || ev.GPUMilliSeconds != 0 {
				t.Fatalf("a job that never ran reports usage: %+v", ev)
			}
			done = true
		case <-deadline:
			t.Fatal("no Cancelled event for the pending job")
		}
	}
	release(t, c)
	waitFor(t, c, blocker.DispatchId, agent.StateSucceeded, 30*time.Second)
}

// TestSlurmConcurrentLaunches drives the real daemons the way the agent
// now may: Launches of distinct dispatches at the same time, duplicate
// Launches of one dispatch at the same time, then Cancels of that one
// beside more duplicate Launches. Each distinct dispatch must become
// exactly one Slurm job that runs to the end, the duplicates one job
// between them, nothing is rejected, and the cancel reaches the job.
// Launches start right after New, before the first poll, so each one also
// looks in Slurm for an existing job (the listing concurrent Launches share).
func TestSlurmConcurrentLaunches(t *testing.T) {
	e := needSlurm(t)
	for name, opt := range map[string]connOpt{"rest": func(*Config) {}, "cli": cliOnly} {
		t.Run(name, func(t *testing.T) {
			c := e.connector(t, opt, func(cfg *Config) { cfg.PollInterval = time.Second })
			const distinct, dups = 12, 6
			stamp := time.Now().UnixNano()
			ids := make([]string, distinct)
			for i := range ids {
				ids[i] = fmt.Sprintf("conc-%s-%d-%d", name, stamp, i)
			}
			dupID := fmt.Sprintf("conc-dup-%s-%d", name, stamp)
			// Fractional (1 % MPS) jobs: the test never waits for GPUs.
			frac := func(id, body string) *agentv1.Dispatch {
				return newDispatch(id).Milli(10).Mode(meridianv1.FractionalMode_FRACTIONAL_MODE_MPS).Script(script(body)).Obj()
			}
			var wg sync.WaitGroup
			errs := make(chan error, distinct+2*dups)
			start := make(chan struct{})
			launch := func(d *agentv1.Dispatch) {
				defer wg.Done()
				<-start
				if err := c.Launch(context.Background(), d); err != nil {
					errs <- fmt.Errorf("Launch %s: %w", d.DispatchId, err)
				}
			}
			for _, id := range ids {
				wg.Add(1)
				go launch(frac(id, "true"))
			}
			for range dups {
				wg.Add(1)
				go launch(frac(dupID, waitRelease))
			}
			close(start)
			wg.Wait()

			// Slurm's own job list: one job per dispatch id.
			count := func() map[string]int {
				t.Helper()
				jobs, err := c.listJobs(context.Background())
				if err != nil {
					t.Fatalf("list jobs: %v", err)
				}
				per := map[string]int{}
				for _, j := range jobs {
					if tag, ok := c.ours(j); ok {
						per[tag.DispatchID]++
					}
				}
				return per
			}
			per := count()
			for _, id := range append(ids, dupID) {
				if per[id] != 1 {
					t.Errorf("dispatch %s has %d Slurm jobs, want 1", id, per[id])
				}
			}
			if got := c.Counters().Submits.Load(); got != distinct+1 {
				t.Errorf("%d submits, want %d", got, distinct+1)
			}

			// The duplicate's job runs; cancel it from several goroutines
			// while more duplicate Launches arrive.
			waitFor(t, c, dupID, agent.StateRunning, 60*time.Second)
			start = make(chan struct{})
			for i := range 2 * dups {
				wg.Add(1)
				if i%2 == 0 {
					go func() {
						defer wg.Done()
						<-start
						if err := c.Cancel(context.Background(), dupID, false); err != nil {
							errs <- fmt.Errorf("Cancel %s: %w", dupID, err)
						}
					}()
				} else {
					go launch(frac(dupID, waitRelease))
				}
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			waitFor(t, c, dupID, agent.StateCancelled, 60*time.Second)
			if n := count()[dupID]; n != 1 {
				t.Errorf("after the cancels dispatch %s has %d Slurm jobs, want 1", dupID, n)
			}

			// Every distinct job ran to the end, once.
			deadline := time.Now().Add(90 * time.Second)
			for {
				list, err := c.List(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				done := 0
				for _, w := range list {
					if w.DispatchID != dupID && w.State == agent.StateSucceeded {
						done++
					}
				}
				if done == distinct && len(list) == distinct+1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d jobs succeeded within 90s (List: %+v)", done, distinct, list)
				}
				time.Sleep(500 * time.Millisecond)
			}
			if n := c.ids.size(); n != 0 {
				t.Errorf("%d per-dispatch locks left, want 0", n)
			}
		})
	}
}

// TestSlurmConditionalJobListing: on a quiet cluster a job listing over
// REST is answered "not modified" (no job list is sent or decoded), and a
// job submitted after such an answer is in the very next listing.
func TestSlurmConditionalJobListing(t *testing.T) {
	e := needSlurm(t)
	c := e.connector(t, restOnly, func(cfg *Config) { cfg.PollInterval = time.Hour })
	rb := c.rest.(*restBackend)
	notModified := func() int64 { rb.jobsMu.Lock(); defer rb.jobsMu.Unlock(); return rb.notModified }
	ctx := context.Background()
	deadline := time.Now().Add(60 * time.Second)
	for notModified() == 0 {
		if _, err := c.listJobs(ctx); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("no listing was answered 304 in 60s (is another test's job still changing state?)")
		}
		time.Sleep(jobsSinceSlack + 500*time.Millisecond)
	}
	d := newDispatch(fmt.Sprintf("cond-%d", time.Now().UnixNano())).Milli(10).Mode(meridianv1.FractionalMode_FRACTIONAL_MODE_MPS).Script(script("true")).Obj()
	if err := c.Launch(ctx, d); err != nil { // its look-up for an existing job may itself be a 304
		t.Fatal(err)
	}
	before := notModified()
	jobs, err := c.listJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, j := range jobs {
		if tag, ok := c.ours(j); ok && tag.DispatchID == d.DispatchId {
			found = true
		}
	}
	if !found || notModified() != before {
		t.Fatalf("the listing after a submit: job found %v, 304 answers %d -> %d; want the job and no 304", found, before, notModified())
	}
	if _, err := c.List(ctx); err != nil {
		t.Fatal(err)
	}
}
