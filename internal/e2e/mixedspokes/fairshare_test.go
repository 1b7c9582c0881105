package mixedspokes

import (
	"fmt"
	"math"
	"testing"
	"time"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// shareTolerance is how far team A's share of the GPU-seconds accrued
// under contention may be from its weight's share (3/4). Usage comes in
// 4-GPU workloads on 12 slots at most, each fill is decided on a snapshot
// of the moment, and Slurm and KWOK start and end work with different
// delays: a few slots either way move the share by several points.
const shareTolerance = 0.10

// One hub, a real Slurm spoke and a real Kubernetes spoke: the teams' work
// runs on both, the one ledger charges each team for what it ran on each
// cluster, and under contention the GPU-seconds split by the teams'
// weights (3:1).
func TestOneLedgerAcrossSlurmAndKubernetes(t *testing.T) {
	f := start(t)
	defer f.cancelAll(t, 90*time.Second)

	// Phase 1 and 2: each team runs one workload on Kubernetes alone, then
	// one on Slurm alone, and the ledger grows for both teams each time.
	// Nothing else runs meanwhile, so each increase comes from that
	// cluster.
	var before [2]usage
	before[0], before[1] = f.queueUsage(t, teamA), f.queueUsage(t, teamB)
	if before[0].gpuSeconds != 0 || before[1].gpuSeconds != 0 {
		t.Fatalf("a new hub's ledger holds usage: %+v %+v", before[0], before[1])
	}
	perCluster := map[string][2]float64{}
	for _, phase := range []struct{ cluster, sel string }{{f.kubeID, selKube}, {f.slurmID, selSlurm}} {
		var ids []string
		for _, q := range []string{teamA, teamB} {
			ids = append(ids, f.Submit(t, f.workload(t, fmt.Sprintf("pinned-%s-%s", phase.sel, q[len(parent)+1:]), q, 3*time.Second, map[string]string{selKey: phase.sel})))
		}
		for _, id := range ids {
			w := f.WaitPhase(t, id, meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED, 60*time.Second)
			if w.GetStatus().GetCluster() != phase.cluster {
				f.Failf(t, "pinned workload %s ran on %q, want %s", w.GetName(), w.GetStatus().GetCluster(), phase.cluster)
			}
		}
		a, b := f.waitUsage(t, "both teams charged for their work on "+phase.cluster, 15*time.Second, func(a, b usage) bool {
			return a.gpuSeconds > before[0].gpuSeconds && b.gpuSeconds > before[1].gpuSeconds
		})
		perCluster[phase.cluster] = [2]float64{a.gpuSeconds - before[0].gpuSeconds, b.gpuSeconds - before[1].gpuSeconds}
		t.Logf("ledger after the pinned work on %s: team-a +%.1f GPU-s, team-b +%.1f GPU-s", phase.cluster, perCluster[phase.cluster][0], perCluster[phase.cluster][1])
		for i, d := range perCluster[phase.cluster] {
			// 4 GPUs for 3 s of work (KWOK completes a pod some seconds
			// after its delay, and the run is charged up to the agent's
			// end time): at least one GPU-second, and no more than a
			// minute of the 4 GPUs.
			if d < 1 || d > 4*60 {
				f.Failf(t, "team %d was charged %.1f GPU-s for one 4-GPU, 3-second workload on %s", i, d, phase.cluster)
			}
		}
		before[0], before[1] = a, b
	}

	// Phase 3: contention. Both teams submit more 4-GPU work than the
	// federation's 48 H100s (32 under Slurm, 16 on KWOK) can run at once,
	// with no cluster selector: the hub places it on either cluster and
	// orders it by the one ledger. Team A has more queued than its 3/4
	// can run in the measured window, team B more than its 1/4.
	const nA, nB = 120, 60
	for i := 0; i < max(nA, nB); i++ {
		if i < nA {
			f.Submit(t, f.workload(t, fmt.Sprintf("a-%03d", i), teamA, 4*time.Second, nil))
		}
		if i < nB {
			f.Submit(t, f.workload(t, fmt.Sprintf("b-%03d", i), teamB, 4*time.Second, nil))
		}
	}
	// The queues' counts come from an accounting view the hub reuses for a
	// moment, so wait until it shows both teams' new work before asking
	// whether any team ran out of it.
	f.waitUsage(t, "the queues count the submitted work", 30*time.Second, func(x, y usage) bool {
		return x.pending+x.running > 0 && y.pending+y.running > 0
	})
	// Measure while both teams still wait for room (contended), once the
	// teams together accrued about 25 s of the whole federation.
	const enough = 1200.0
	start := before
	var a, b usage
	f.waitUsage(t, "contended usage accrued", 150*time.Second, func(x, y usage) bool {
		a, b = x, y
		if x.pending == 0 || y.pending == 0 {
			f.Failf(t, "a team ran out of queued work before the measurement (team-a %+v, team-b %+v): the test did not contend", x, y)
		}
		return (x.gpuSeconds-start[0].gpuSeconds)+(y.gpuSeconds-start[1].gpuSeconds) >= enough
	})
	dA, dB := a.gpuSeconds-start[0].gpuSeconds, b.gpuSeconds-start[1].gpuSeconds
	share := dA / (dA + dB)
	want := float64(weightA) / float64(weightA+weightB)
	t.Logf("contended: team-a %.0f GPU-s, team-b %.0f GPU-s: team-a's share %.3f (weight share %.3f, tolerance %.2f); fairshare factors %.3f / %.3f; running %d / %d, pending %d / %d",
		dA, dB, share, want, shareTolerance, a.fairshare, b.fairshare, a.running, b.running, a.pending, b.pending)

	// (a) Both spokes ran work of both teams, and the contended work was
	// placed on both.
	ran := map[string]map[string]int{} // queue -> cluster -> workloads dispatched there
	contended := map[string]int{}      // cluster -> selector-free workloads dispatched there
	for _, w := range f.all(t) {
		c := w.GetStatus().GetCluster()
		if c == "" {
			continue
		}
		if ran[w.GetQueue()] == nil {
			ran[w.GetQueue()] = map[string]int{}
		}
		ran[w.GetQueue()][c]++
		if len(w.GetClusterSelector()) == 0 {
			contended[c]++
		}
	}
	t.Logf("workloads dispatched per team and cluster: %v; contended work per cluster: %v", ran, contended)
	for _, q := range []string{teamA, teamB} {
		for _, c := range []string{f.slurmID, f.kubeID} {
			if ran[q][c] == 0 {
				f.Failf(t, "no workload of %s ran on %s: %v", q, c, ran)
			}
		}
	}
	if contended[f.slurmID] == 0 || contended[f.kubeID] == 0 {
		f.Failf(t, "the contended work ran on one cluster only: %v", contended)
	}

	// (b) The one ledger charged both clusters' GPU-seconds to each team
	// (checked per cluster above) and keeps accruing the contended work.
	if dA <= 0 || dB <= 0 {
		f.Failf(t, "the ledger did not charge the contended work: team-a +%.1f, team-b +%.1f GPU-s", dA, dB)
	}
	// (c) Under contention the teams' shares follow their weights.
	if math.Abs(share-want) > shareTolerance {
		f.Failf(t, "team-a's share of the contended GPU-seconds is %.3f (%.0f vs %.0f GPU-s), want %.3f ± %.2f by weight %d:%d",
			share, dA, dB, want, shareTolerance, weightA, weightB)
	}
	if a.fairshare <= 0 || b.fairshare <= 0 {
		f.Failf(t, "fairshare factors %.3f and %.3f; want both positive", a.fairshare, b.fairshare)
	}
}
