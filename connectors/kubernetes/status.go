package kubernetes

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// Status derives a dispatch's state from its Jobs and their pods (all
// carrying its labels). It is pure.
//
//	a pod evicted or disrupted (DisruptionTarget, reason Evicted/Preempting) -> Preempted
//	a Job with condition Failed=True                                         -> Failed (Job reason and message, exit code of the failed container)
//	fewer Jobs than the dispatch has pod sets                                -> Pending ("1 of 2 jobs present")
//	every Job Complete=True                                                  -> Succeeded (exit 0)
//	every Job with at least min-replicas pods Running                        -> Running
//	otherwise (suspended by Kueue, pods pending)                             -> Pending
//
// now is used for the GPU-milli-seconds of work still running.
func Status(jobs []*batchv1.Job, pods []*corev1.Pod, now time.Time) agent.WorkStatus {
	var ws agent.WorkStatus
	if len(jobs) == 0 {
		return ws
	}
	jobs = slices.Clone(jobs)
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].Name < jobs[j].Name })
	ws.DispatchID = jobs[0].Annotations[AnnDispatchID]
	ws.WorkloadID = jobs[0].Annotations[AnnWorkloadID]
	want, _ := strconv.Atoi(jobs[0].Annotations[AnnPodSets])

	podsOf := map[string][]*corev1.Pod{}
	for _, p := range pods {
		if n := p.Labels[batchv1.JobNameLabel]; n != "" {
			podsOf[n] = append(podsOf[n], p)
		}
	}
	var milli int64
	complete, running := 0, 0
	var failed *batchv1.Job
	for _, j := range jobs {
		m, _ := strconv.ParseInt(j.Annotations[AnnGPUMilli], 10, 64)
		milli += m
		if st := j.Status.StartTime; st != nil && (ws.StartedAt.IsZero() || st.Time.Before(ws.StartedAt)) {
			ws.StartedAt = st.Time
		}
		if ct := j.Status.CompletionTime; ct != nil && ct.Time.After(ws.FinishedAt) {
			ws.FinishedAt = ct.Time
		}
		if cond(j, batchv1.JobFailed) != nil && failed == nil {
			failed = j
		}
		if cond(j, batchv1.JobComplete) != nil {
			complete++
		}
		need, _ := strconv.Atoi(j.Annotations[AnnMinReplicas])
		if need <= 0 && j.Spec.Parallelism != nil {
			need = int(*j.Spec.Parallelism)
		}
		run := 0
		ps := slices.Clone(podsOf[j.Name])
		sort.Slice(ps, func(a, b int) bool {
			return ps[a].Annotations[batchv1.JobCompletionIndexAnnotation] < ps[b].Annotations[batchv1.JobCompletionIndexAnnotation]
		})
		for _, p := range ps {
			if p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodSucceeded {
				run++
			}
			if p.Spec.NodeName != "" && !slices.Contains(ws.Nodes, p.Spec.NodeName) {
				ws.Nodes = append(ws.Nodes, p.Spec.NodeName)
			}
		}
		if run >= need && need > 0 {
			running++
		}
	}
	// Preemption and eviction win over the Job's own failure.
	for _, p := range pods {
		if why := disrupted(p); why != "" {
			ws.State, ws.Reason = agent.StatePreempted, why
			break
		}
	}
	switch {
	case ws.State == agent.StatePreempted:
	case failed != nil:
		c := cond(failed, batchv1.JobFailed)
		ws.State = agent.StateFailed
		ws.Reason = strings.TrimSpace(c.Reason + ": " + c.Message)
		if ws.FinishedAt.IsZero() {
			ws.FinishedAt = c.LastTransitionTime.Time
		}
		ws.ExitCode = exitCode(podsOf[failed.Name])
	case want > 0 && len(jobs) < want:
		// Still being created (Launch creates them one by one), or deleted by
		// someone else: the connector tells the two apart (it saw them all).
		ws.State = agent.StatePending
		ws.Reason = fmt.Sprintf("%d of %d jobs present", len(jobs), want)
	case complete == len(jobs):
		ws.State = agent.StateSucceeded
		ws.ExitCode = ptr(int32(0))
	case running == len(jobs):
		ws.State = agent.StateRunning
	default:
		ws.State = agent.StatePending
	}
	if ws.State.Terminal() && ws.FinishedAt.IsZero() {
		ws.FinishedAt = now
	}
	if !ws.StartedAt.IsZero() {
		end := now
		if ws.State.Terminal() {
			end = ws.FinishedAt
		}
		if d := end.Sub(ws.StartedAt); d > 0 {
			ws.GPUMilliSeconds = milli * int64(d/time.Second)
		}
	}
	return ws
}

func cond(j *batchv1.Job, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range j.Status.Conditions {
		if c := &j.Status.Conditions[i]; c.Type == t && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

// disrupted says why a pod was preempted or evicted ("" if it was not).
func disrupted(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return strings.TrimSpace("evicted: " + c.Reason + " " + c.Message)
		}
	}
	switch p.Status.Reason {
	case "Evicted", "Preempting", "Terminated", "NodeShutdown":
		return strings.TrimSpace("evicted: " + p.Status.Reason + " " + p.Status.Message)
	}
	return ""
}

// exitCode is the first non-zero exit code among failed pods' containers.
func exitCode(pods []*corev1.Pod) *int32 {
	for _, p := range pods {
		if p.Status.Phase != corev1.PodFailed {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
				return ptr(t.ExitCode)
			}
		}
	}
	return nil
}
