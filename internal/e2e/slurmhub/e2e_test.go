package slurmhub

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/meridian-gpu/meridian/connectors/slurm"
	"github.com/meridian-gpu/meridian/internal/cli"
	"github.com/meridian-gpu/meridian/internal/e2e/e2eutil"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// These tests run the whole path: a REST or gRPC submit, the hub's
// scheduling loop, JetStream, a real spoke agent with the Slurm connector,
// real slurmctld/slurmd daemons, the job's end, events back, and the
// workload's final phase. They run in source order and share one hub.

const (
	succeeded = meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED
	failed    = meridianv1.WorkloadPhase_WORKLOAD_PHASE_FAILED
	cancelled = meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED
	running   = meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING
)

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the job did not write %s: %v", path, err)
	}
	return strings.TrimSpace(string(b))
}

func nodesOf(t *testing.T, j slurm.JobInfo) []string {
	t.Helper()
	names, err := slurm.ExpandHostlist(j.Nodes)
	if err != nil {
		t.Fatalf("job %d nodes %q: %v", j.ID, j.Nodes, err)
	}
	return names
}

// TestGangFractionalAndExitCode: a 2-node x 8-GPU gang, an MPS half GPU and
// a job that exits 3, all submitted over REST at once.
func TestGangFractionalAndExitCode(t *testing.T) {
	f := need(t)
	gangDir, mpsDir, failDir := t.TempDir(), t.TempDir(), t.TempDir()
	gang := f.submitREST(t, workload("e2e-gang", 2, 8000,
		`echo "$SLURM_JOB_NUM_NODES $SLURM_JOB_NODELIST $CUDA_VISIBLE_DEVICES" > gang.out; [ "$SLURM_JOB_NUM_NODES" = 2 ]`, gangDir, onSlurm))
	mps := f.submitREST(t, workload("e2e-mps", 1, 500,
		`echo "$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" > mps.out; [ -n "$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" ]`, mpsDir,
		onSlurm, fractional(meridianv1.FractionalMode_FRACTIONAL_MODE_MPS)))
	fail := f.submitREST(t, workload("e2e-exit3", 1, 1000, `echo started > fail.out; exit 3`, failDir, onSlurm))

	w := f.WaitPhase(t, gang, succeeded, 60*time.Second)
	if w.GetStatus().GetCluster() != f.slurmID || w.GetStatus().GetExitCode() != 0 {
		t.Errorf("gang: cluster %q exit %s, want %s and 0", w.GetStatus().GetCluster(), e2eutil.ExitOf(w.GetStatus().ExitCode), f.slurmID)
	}
	job := f.oneJob(t, w.GetStatus().GetDispatchId())
	if nodes := nodesOf(t, job); len(nodes) != 2 || nodes[0] == nodes[1] || job.State != "COMPLETED" {
		t.Errorf("gang's Slurm job %d: state %s on nodes %v, want COMPLETED on 2 nodes", job.ID, job.State, nodes)
	}
	if out := strings.Fields(readFile(t, filepath.Join(gangDir, "gang.out"))); len(out) < 3 || out[0] != "2" || strings.Count(out[2], ",") != 7 {
		t.Errorf("gang saw (nodes, nodelist, CUDA_VISIBLE_DEVICES) = %q, want 2 nodes and 8 GPUs on the first", out)
	}

	w = f.WaitPhase(t, mps, succeeded, 60*time.Second)
	job = f.oneJob(t, w.GetStatus().GetDispatchId())
	// Slurm sets the MPS share; 22.05 with shard and mps GRES on the same
	// GPUs computes it from the wrong denominator (1250 for mps:50 here),
	// so only its presence is checked, and mps:50 on the job below.
	if got := readFile(t, filepath.Join(mpsDir, "mps.out")); got == "" || strings.Trim(got, "0123456789") != "" {
		t.Errorf("MPS job saw CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%q, want a number", got)
	}
	if !strings.Contains(strings.Join(job.GresDetail, ","), "mps:50") && !strings.Contains(job.TresPerNode, "mps:50") {
		t.Errorf("MPS job %d: gres detail %v, tres per node %q, want mps:50", job.ID, job.GresDetail, job.TresPerNode)
	}

	w = f.WaitPhase(t, fail, failed, 60*time.Second)
	if w.GetStatus().ExitCode == nil || w.GetStatus().GetExitCode() != 3 {
		t.Errorf("failing job: exit %s, want 3 (message %q)", e2eutil.ExitOf(w.GetStatus().ExitCode), w.GetStatus().GetMessage())
	}
	job = f.oneJob(t, w.GetStatus().GetDispatchId())
	if job.State != "FAILED" || job.ExitCode != 3<<8 {
		t.Errorf("failing job %d: Slurm says %s with wait status %d, want FAILED and 768", job.ID, job.State, job.ExitCode)
	}
	if readFile(t, filepath.Join(failDir, "fail.out")) != "started" {
		t.Error("the failing job's script did not run")
	}
}

// TestRedeliveredDispatchIsOneSlurmJob delivers one dispatch three times:
// from the hub, again to the same agent, and again to a restarted agent
// whose connector has no memory. Slurm must hold one job for it.
func TestRedeliveredDispatchIsOneSlurmJob(t *testing.T) {
	f := need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	bus, err := natsbus.Connect(ctx, f.hub.NATSURL(), natsbus.WithName("e2e-redeliver"))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	subj, err := natsbus.DispatchSubject(f.slurmID)
	if err != nil {
		t.Fatal(err)
	}
	// A plain subscriber on the dispatch subject sees what the hub stores
	// in JetStream: the exact bytes the agent got.
	msgs := make(chan *nats.Msg, 64)
	sub, err := bus.Conn().ChanSubscribe(subj, msgs)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := bus.Conn().Flush(); err != nil {
		t.Fatal(err)
	}

	id := f.Submit(t, workload("e2e-redeliver", 1, 1000, `sleep 4`, t.TempDir(), onSlurm))
	w := f.WaitPhase(t, id, running, 30*time.Second)
	did := w.GetStatus().GetDispatchId()
	var payload []byte
	for payload == nil {
		select {
		case m := <-msgs:
			if m.Header.Get(nats.MsgIdHdr) == did {
				payload = m.Data
			}
		case <-ctx.Done():
			t.Fatalf("never saw the dispatch %s on %s", did, subj)
		}
	}
	c1 := f.slurmConn
	submitsBefore := c1.Counters().Submits.Load()

	redeliver := func(msgID string) {
		t.Helper()
		dup, err := bus.PublishDispatch(ctx, f.slurmID, msgID, payload)
		if err != nil || dup {
			t.Fatalf("redeliver as %s: duplicate=%v err=%v", msgID, dup, err)
		}
		// Wait until the agent consumed it.
		deadline := time.Now().Add(20 * time.Second)
		for {
			n, err := bus.DispatchBacklog(ctx, f.slurmID)
			if err == nil && n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the agent did not consume the redelivery %s (backlog %d, err %v)", msgID, n, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(500 * time.Millisecond) // the launch answer, if any, follows the ack
	}
	redeliver(did + "-again")
	if n := len(f.jobsOf(t, did)); n != 1 {
		t.Fatalf("after a redelivery to the same agent dispatch %s has %d Slurm jobs, want 1", did, n)
	}
	if got := c1.Counters().Submits.Load(); got != submitsBefore {
		t.Errorf("the redelivery made the connector submit %d more jobs, want 0", got-submitsBefore)
	}
	c2 := f.restartSlurmAgent(t, false)
	redeliver(did + "-after-restart")
	if n := len(f.jobsOf(t, did)); n != 1 {
		t.Fatalf("after a redelivery to a restarted agent dispatch %s has %d Slurm jobs, want 1", did, n)
	}
	if got := c2.Counters().Submits.Load(); got != 0 {
		t.Errorf("the restarted connector submitted %d jobs, want 0 (it must adopt the running job)", got)
	}
	w = f.WaitPhase(t, id, succeeded, 60*time.Second)
	if w.GetStatus().GetAttempts() != 1 {
		t.Errorf("workload attempts %d, want 1", w.GetStatus().GetAttempts())
	}
	if j := f.oneJob(t, did); j.State != "COMPLETED" {
		t.Errorf("Slurm job %d is %s, want COMPLETED", j.ID, j.State)
	}
}

// TestCancelFromMeridianctl cancels a running Slurm job through the CLI's
// code path (internal/cli.Main, what meridianctl runs).
func TestCancelFromMeridianctl(t *testing.T) {
	f := need(t)
	id := f.Submit(t, workload("e2e-cancel", 1, 1000, `sleep 120`, t.TempDir(), onSlurm))
	w := f.WaitPhase(t, id, running, 30*time.Second)
	did := w.GetStatus().GetDispatchId()
	if j := f.oneJob(t, did); j.State != "RUNNING" {
		t.Fatalf("Slurm job %d is %s while the hub says RUNNING", j.ID, j.State)
	}
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code := cli.Main(ctx, append(f.h.CtlArgs(), "cancel", id, "--reason", "e2e"), cli.Env{Stdout: &out, Stderr: &errb})
	if code != cli.ExitOK {
		t.Fatalf("meridianctl cancel %s: exit %d\n%s%s", id, code, out.String(), errb.String())
	}
	f.WaitPhase(t, id, cancelled, 30*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for {
		j := f.oneJob(t, did)
		if j.State == "CANCELLED" {
			break
		}
		if time.Now().After(deadline) {
			f.Failf(t, "Slurm job %d is still %s 30s after meridianctl cancel", j.ID, j.State)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestMixedFederationPlacesInBoth submits three 4 x 8-GPU gangs with no
// cluster selector: Slurm holds one (32 GPUs), the simulated cluster two
// (64), so the hub must use both.
func TestMixedFederationPlacesInBoth(t *testing.T) {
	f := need(t)
	var ids []string
	for i := 0; i < 3; i++ {
		ids = append(ids, f.Submit(t, workload("e2e-mixed", 4, 8000, `sleep 2`, t.TempDir(), simFor(2*time.Second))))
	}
	where := map[string]int{}
	for _, id := range ids {
		w := f.WaitPhase(t, id, succeeded, 60*time.Second)
		c := w.GetStatus().GetCluster()
		where[c]++
		if c == f.slurmID {
			if n := len(nodesOf(t, f.oneJob(t, w.GetStatus().GetDispatchId()))); n != 4 {
				t.Errorf("the gang on Slurm ran on %d nodes, want 4", n)
			}
		}
	}
	if where[f.slurmID] == 0 || where[simID] == 0 || len(where) != 2 {
		t.Fatalf("gangs ran on %v, want both %s and %s", where, f.slurmID, simID)
	}
}

// TestSlurmdKilled kills one slurmd: Slurm marks the node down, the Slurm
// spoke's advertised capacity drops by its 8 GPUs, a 4-node gang goes to
// the simulated cluster, and a 3-node gang for Slurm avoids the dead node.
// The slurmd is restarted afterwards.
func TestSlurmdKilled(t *testing.T) {
	f := need(t)
	const victim = "gpu4"
	deadline := time.Now().Add(60 * time.Second)
	for {
		total, free := f.capacity(t, f.slurmID)
		if total == 32000 && free == 32 {
			break
		}
		if time.Now().After(deadline) {
			f.Failf(t, "the Slurm spoke never advertised 32 free GPUs before the kill (total %d milli, %d free)", total, free)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := f.local.KillSlurmd(victim); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		if err := f.local.Restore(ctx, victim); err != nil {
			t.Errorf("restart slurmd %s: %v", victim, err)
		}
	})
	deadline = time.Now().Add(75 * time.Second)
	for {
		total, free := f.capacity(t, f.slurmID)
		// The dead node's GPUs stop being free (the hub counts them as
		// installed but unusable).
		if free <= 24 {
			t.Logf("advertised capacity fell to %d GPUs, %d free, %.1fs after the kill", total/1000, free, time.Since(killed).Seconds())
			break
		}
		if time.Now().After(deadline) {
			f.Failf(t, "75s after killing slurmd %s the Slurm spoke still advertises %d milli, %d free", victim, total, free)
		}
		time.Sleep(250 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	st, err := f.local.NodeState(ctx, victim)
	cancel()
	if err != nil || !(strings.HasSuffix(st, "*") || strings.HasPrefix(st, "down")) {
		t.Errorf("sinfo shows %s as %q (err %v), want not responding or down", victim, st, err)
	}

	big := f.Submit(t, workload("e2e-after-kill-4x8", 4, 8000, `sleep 1`, t.TempDir(), simFor(time.Second)))
	dir := t.TempDir()
	three := f.Submit(t, workload("e2e-after-kill-3x8", 3, 8000, `echo "$SLURM_JOB_NODELIST" > nodes.out`, dir, onSlurm))
	if w := f.WaitPhase(t, big, succeeded, 60*time.Second); w.GetStatus().GetCluster() != simID {
		t.Errorf("a 4 x 8 gang went to %s with a Slurm node down, want %s", w.GetStatus().GetCluster(), simID)
	}
	w := f.WaitPhase(t, three, succeeded, 60*time.Second)
	nodes := nodesOf(t, f.oneJob(t, w.GetStatus().GetDispatchId()))
	if len(nodes) != 3 {
		t.Errorf("the 3 x 8 gang ran on %v, want 3 nodes", nodes)
	}
	for _, n := range nodes {
		if n == victim {
			t.Errorf("the 3 x 8 gang ran on %v, which includes the dead node %s", nodes, victim)
		}
	}
}
