package slurmhub

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/connectors/slurm"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// BenchmarkDispatchVsSbatch measures, in one run against the same
// slurmctld, the submission rates of b.N jobs of one shape (one task on
// one node with a 1 % MPS share of an H100, script "true"):
//
//   - meridian: b.N workloads submitted over gRPC to the hub, scheduled,
//     published on JetStream, taken by the spoke agent and submitted by the
//     Slurm connector over slurmrestd; the clock stops when Slurm has
//     accepted (given a job id to) all of them.
//   - connector: the Slurm connector alone, Launch called b.N times in a
//     loop (no hub, no NATS): what the agent's side costs; then b.N more
//     from 4 goroutines at once (connector-4x), as the agent now calls it.
//   - sbatch: b.N "sbatch --parsable" commands run one after the other
//     with the same options, as a user's submit script would.
//
// The jobs are fractional so the hub's capacity check does not hold them
// back (b.N x 10 milli fits the cluster); Slurm runs them as it can. Use
// -benchtime Nx (e.g. 200x): every iteration is a real Slurm job.
func BenchmarkDispatchVsSbatch(b *testing.B) {
	f := need(b)
	n := b.N
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	f.waitNoActiveJobs(b, ctx, f.slurmID)
	benchID := fmt.Sprintf("bench-sbatch-%d", os.Getpid())

	m0 := f.hubMetrics(b)
	b.ResetTimer()
	// ---- Meridian: gRPC submit -> hub -> JetStream -> agent -> slurmrestd,
	// the agent and the connector with their production defaults.
	b.StopTimer()
	c := f.restartSlurmAgent(b, true)
	defer f.restartSlurmAgent(b, false)
	if err := f.waitClusters(ctx, 30*time.Second, f.slurmID); err != nil {
		b.Fatal(err)
	}
	cpu0 := f.cpuNow(b)
	b.StartTimer()
	before := c.Counters().Submits.Load()
	dir := b.TempDir()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var subErr atomic.Value
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				w := workload(fmt.Sprintf("bench-%d", i), 1, 10, "true", dir, onSlurm,
					fractional(meridianv1.FractionalMode_FRACTIONAL_MODE_MPS))
				if _, err := f.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: w}); err != nil {
					subErr.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := subErr.Load(); err != nil {
		b.Fatalf("submit: %v", err)
	}
	submitted := time.Since(start)
	sampled := false
	for c.Counters().Submits.Load()-before < int64(n) {
		if !sampled && time.Since(start) > time.Second {
			sampled = true
			f.logPending(b, ctx)
		}
		if ctx.Err() != nil {
			f.failfTB(b, "Slurm accepted %d of %d Meridian jobs before the time ran out", c.Counters().Submits.Load()-before, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
	meridian := time.Since(start)
	b.StopTimer()
	m1 := f.hubMetrics(b)
	cycles := m1["meridian_scheduler_cycle_seconds_count"] - m0["meridian_scheduler_cycle_seconds_count"]
	cycleSecs := m1["meridian_scheduler_cycle_seconds_sum"] - m0["meridian_scheduler_cycle_seconds_sum"]
	if cycles > 0 {
		b.Logf("hub during the Meridian phase: %.0f scheduling cycles (mean %.1f ms), %.0f dispatches, %.0f commit conflicts",
			cycles, 1000*cycleSecs/cycles, m1["meridian_dispatches_total"]-m0["meridian_dispatches_total"],
			m1["meridian_scheduler_commit_conflicts_total"]-m0["meridian_scheduler_commit_conflicts_total"])
	}
	f.waitNoActiveJobs(b, ctx, f.slurmID)
	mCPU := f.cpuNow(b).sub(cpu0)

	// ---- The connector alone: Launch called in a loop, no hub, no NATS.
	connID := fmt.Sprintf("bench-conn-%d", os.Getpid())
	round := benchRound.Add(1) // dispatch ids must be new in every round, or Launch adopts the old jobs
	cfg := f.local.Config(connID)
	bc, err := slurm.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer bc.Close()
	if _, err := bc.Inventory(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := bc.List(ctx); err != nil { // the first poll: memory is complete
		b.Fatal(err)
	}
	w := workload("bench-conn", 1, 10, "true", dir, fractional(meridianv1.FractionalMode_FRACTIONAL_MODE_MPS))
	b.StartTimer()
	start = time.Now()
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("bench-conn-%d-%d-%d", os.Getpid(), round, i)
		if err := bc.Launch(ctx, &agentv1.Dispatch{DispatchId: id, WorkloadId: id, ClusterId: connID, Workload: w}); err != nil {
			b.Fatalf("Launch: %v", err)
		}
	}
	connector := time.Since(start)
	b.StopTimer()
	f.waitNoActiveJobs(b, ctx, connID)

	// ---- The connector alone, Launch called by 4 goroutines at once (the
	// agent launches different dispatches concurrently).
	b.StartTimer()
	start = time.Now()
	var nextP atomic.Int64
	var launchErr atomic.Value
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := nextP.Add(1)
				if i > int64(n) {
					return
				}
				id := fmt.Sprintf("bench-connp-%d-%d-%d", os.Getpid(), round, i)
				if err := bc.Launch(ctx, &agentv1.Dispatch{DispatchId: id, WorkloadId: id, ClusterId: connID, Workload: w}); err != nil {
					launchErr.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	connectorPar := time.Since(start)
	b.StopTimer()
	if err := launchErr.Load(); err != nil {
		b.Fatalf("Launch: %v", err)
	}
	f.waitNoActiveJobs(b, ctx, connID)

	// ---- sbatch, one command after the other, same job shape.
	req := slurm.SubmitRequest{
		Script: "#!/bin/bash\ntrue\n", Partition: f.local.Vars[slurm.EnvPartition], Nodes: 1, TasksPerNode: 1,
		Gres: "mps:1", Workdir: dir, TimeLimit: 5 * time.Minute,
	}
	lat := make([]time.Duration, 0, n)
	cpu0 = f.cpuNow(b)
	b.StartTimer()
	start = time.Now()
	for i := 0; i < n; i++ {
		req.Name = fmt.Sprintf("%s-%d", benchID, i)
		req.Comment = fmt.Sprintf("%s dispatch=%s workload=%s cluster=%s", slurm.CommentPrefix, req.Name, req.Name, benchID)
		t0 := time.Now()
		cmd := f.local.Command(ctx, "sbatch", slurm.SbatchArgs(req)...)
		cmd.Stdin = strings.NewReader(req.Script)
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("sbatch: %v\n%s", err, out)
		}
		if _, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err != nil {
			b.Fatalf("sbatch printed %q, not a job id", out)
		}
		lat = append(lat, time.Since(t0))
	}
	sbatch := time.Since(start)
	b.StopTimer()
	f.waitNoActiveJobs(b, ctx, benchID)
	sCPU := f.cpuNow(b).sub(cpu0)

	mRate := float64(n) / meridian.Seconds()
	cRate := float64(n) / connector.Seconds()
	cpRate := float64(n) / connectorPar.Seconds()
	sRate := float64(n) / sbatch.Seconds()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(mRate, "meridian-jobs/s")
	b.ReportMetric(cRate, "connector-jobs/s")
	b.ReportMetric(cpRate, "connector-4x-jobs/s")
	b.ReportMetric(sRate, "sbatch-jobs/s")
	b.ReportMetric(mRate/sRate, "meridian/sbatch")
	b.ReportMetric(0, "ns/op")
	perJob := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(n) }
	b.ReportMetric(perJob(mCPU.self), "meridian-cpu-ms/job")
	b.ReportMetric(perJob(mCPU.slurm), "slurm-daemons-cpu-ms/job")
	b.ReportMetric(perJob(sCPU.children), "sbatch-cpu-ms/job")
	b.Logf("CPU per job, from the first submit until the jobs ended: Meridian phase: this process (hub, etcd, NATS, agents, connector) %.2f ms, "+
		"Slurm daemons (slurmctld, slurmrestd, 4 slurmd) %.2f ms; sbatch phase: the sbatch commands %.2f ms, Slurm daemons %.2f ms, this process idling %.2f ms",
		perJob(mCPU.self), perJob(mCPU.slurm), perJob(sCPU.children), perJob(sCPU.slurm), perJob(sCPU.self))
	b.Logf("%d jobs: Meridian (gRPC submit -> hub -> agent -> slurmrestd accepted) %.1f jobs/s in %s (gRPC submits done after %s); "+
		"connector alone (Launch over slurmrestd) %.1f jobs/s in %s, with 4 concurrent callers %.1f jobs/s in %s; sbatch %.1f jobs/s in %s (p50 %s, p99 %s); Meridian/sbatch %.2f",
		n, mRate, meridian.Round(time.Millisecond), submitted.Round(time.Millisecond), cRate, connector.Round(time.Millisecond),
		cpRate, connectorPar.Round(time.Millisecond),
		sRate, sbatch.Round(time.Millisecond), lat[len(lat)/2].Round(time.Microsecond), lat[len(lat)*99/100].Round(time.Microsecond), mRate/sRate)
}

var benchRound atomic.Int64

// waitNoActiveJobs waits until none of clusterID's jobs is pending or
// running, so each measurement starts from an idle controller.
func (f *fixture) waitNoActiveJobs(tb testing.TB, ctx context.Context, clusterID string) {
	tb.Helper()
	for {
		// A text squeue in a child process: decoding squeue --json here
		// would count as Meridian's CPU in the measurement windows.
		active, err := f.local.ActiveJobs(ctx, clusterID)
		if err != nil {
			tb.Fatalf("list jobs: %v", err)
		}
		if active == 0 {
			return
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("%d jobs of %s still active when the time ran out", active, clusterID)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (f *fixture) failfTB(tb testing.TB, format string, args ...any) {
	tb.Helper()
	tb.Fatalf(format+"\n--- fixture log (tail) ---\n%s", append(args, f.logBuf.Tail(6000))...)
}

// hubMetrics reads the hub's unlabelled meridian_* samples from /metrics.
func (f *fixture) hubMetrics(tb testing.TB) map[string]float64 {
	tb.Helper()
	req, _ := http.NewRequest(http.MethodGet, f.rest+"/metrics", nil)
	f.h.Authorize(req) // /metrics needs authentication
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		name, val, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(name, "meridian_") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			out[name] = v
		}
	}
	return out
}

// logPending logs why a few queued workloads wait, as the hub explains it.
func (f *fixture) logPending(tb testing.TB, ctx context.Context) {
	resp, err := f.wl.ListWorkloads(ctx, &meridianv1.ListWorkloadsRequest{PageSize: 500,
		Phase: []meridianv1.WorkloadPhase{meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED}})
	if err != nil {
		tb.Logf("list queued: %v", err)
		return
	}
	reasons := map[string]int{}
	for _, w := range resp.GetWorkloads() {
		reasons[w.GetStatus().GetPendingReason()]++
	}
	tb.Logf("1s into the Meridian phase, %d workloads queued: %v", len(resp.GetWorkloads()), reasons)
}

// cpuSample is CPU time used so far: by this process (the hub, its etcd and
// NATS, the agents, the connector), by its finished children (the sbatch
// commands) and by the Slurm daemons.
type cpuSample struct{ self, children, slurm time.Duration }

func (a cpuSample) sub(b cpuSample) cpuSample {
	return cpuSample{a.self - b.self, a.children - b.children, a.slurm - b.slurm}
}

func (f *fixture) cpuNow(tb testing.TB) cpuSample {
	tb.Helper()
	var s cpuSample
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	s.children = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	for _, d := range []string{"slurmctld", "slurmrestd", "slurmd-gpu1", "slurmd-gpu2", "slurmd-gpu3", "slurmd-gpu4"} {
		s.slurm += daemonCPU(tb, filepath.Join(StateDir(), "run", d+".pid"))
	}
	return s
}

// daemonCPU reads utime+stime of the process in pidFile from /proc (clock
// ticks of 1/100 s, Linux's USER_HZ).
func daemonCPU(tb testing.TB, pidFile string) time.Duration {
	tb.Helper()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		tb.Fatalf("slurm pid file: %v", err)
	}
	stat, err := os.ReadFile("/proc/" + strings.TrimSpace(string(b)) + "/stat")
	if err != nil {
		tb.Fatalf("slurm daemon stat: %v", err)
	}
	// Fields after the command name "(...)": state is field 3, utime 14, stime 15.
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+2:])
	fields := strings.Fields(rest)
	if len(fields) < 13 {
		tb.Fatalf("short /proc stat for %s", pidFile)
	}
	ut, _ := strconv.ParseInt(fields[11], 10, 64)
	st, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
