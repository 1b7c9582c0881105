package kubernetes

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

func TestStatus(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := t0.Add(100 * time.Second)
	job := func(name string) *jobBuilder { return makeJob(name, "d-1", 2, 2).Started(t0) }
	a, b := job("a").Obj(), job("b").Obj()
	running := func(j *batchv1.Job) []*corev1.Pod {
		return []*corev1.Pod{jobPod(j, 0, "n1").Obj(), jobPod(j, 1, "n2").Obj()}
	}
	tests := map[string]struct {
		jobs     []*batchv1.Job
		pods     []*corev1.Pod
		state    agent.WorkState
		reason   string
		exit     *int32
		nodes    int
		gpuMilli int64
	}{
		"pending":                       {jobs: []*batchv1.Job{a, b}, pods: []*corev1.Pod{jobPod(a, 0, "").Phase(corev1.PodPending).Obj()}, state: agent.StatePending},
		"one job running is not enough": {jobs: []*batchv1.Job{a, b}, pods: running(a), state: agent.StatePending, nodes: 2},
		"running": {jobs: []*batchv1.Job{a, b}, pods: append(running(a), running(b)...), state: agent.StateRunning, nodes: 2,
			gpuMilli: 4000 * 100},
		"succeeded": {jobs: []*batchv1.Job{
			job("a").Cond(batchv1.JobComplete, "", t0.Add(10*time.Second)).Obj(),
			job("b").Cond(batchv1.JobComplete, "", t0.Add(20*time.Second)).Obj()},
			state: agent.StateSucceeded, exit: ptr(int32(0)), gpuMilli: 4000 * 20},
		"failed with exit code": {jobs: []*batchv1.Job{job("a").Cond(batchv1.JobFailed, "BackoffLimitExceeded", t0.Add(5*time.Second)).Obj(), b},
			pods:  []*corev1.Pod{jobPod(a, 0, "n1").Phase(corev1.PodFailed).Exit(3).Obj()},
			state: agent.StateFailed, reason: "BackoffLimitExceeded", exit: ptr(int32(3)), nodes: 1, gpuMilli: 4000 * 5},
		"evicted is preempted": {jobs: []*batchv1.Job{job("a").Cond(batchv1.JobFailed, "BackoffLimitExceeded", t0).Obj(), b},
			pods:  []*corev1.Pod{jobPod(a, 0, "n1").Phase(corev1.PodFailed).Disrupted("PreemptionByScheduler").Obj()},
			state: agent.StatePreempted, reason: "PreemptionByScheduler", nodes: 1},
		"incomplete set": {jobs: []*batchv1.Job{a}, pods: running(a), state: agent.StatePending, reason: "1 of 2 jobs present", nodes: 2},
		"no jobs":        {state: agent.StateUnknown},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ws := Status(tc.jobs, tc.pods, now)
			if ws.State != tc.state {
				t.Fatalf("state %s, want %s (reason %q)", ws.State, tc.state, ws.Reason)
			}
			if tc.state == agent.StateUnknown {
				return
			}
			if ws.DispatchID != "d-1" || ws.WorkloadID != "wl-d-1" {
				t.Fatalf("ids %q %q", ws.DispatchID, ws.WorkloadID)
			}
			if !strings.Contains(ws.Reason, tc.reason) {
				t.Fatalf("reason %q, want %q", ws.Reason, tc.reason)
			}
			if (ws.ExitCode == nil) != (tc.exit == nil) || (tc.exit != nil && *ws.ExitCode != *tc.exit) {
				t.Fatalf("exit %v, want %v", ws.ExitCode, tc.exit)
			}
			if len(ws.Nodes) != tc.nodes {
				t.Fatalf("nodes %v, want %d", ws.Nodes, tc.nodes)
			}
			if tc.gpuMilli != 0 && ws.GPUMilliSeconds != tc.gpuMilli {
				t.Fatalf("gpu milli-seconds %d, want %d", ws.GPUMilliSeconds, tc.gpuMilli)
			}
			if ws.State.Terminal() && ws.FinishedAt.IsZero() {
				t.Fatal("terminal without FinishedAt")
			}
		})
	}
}
