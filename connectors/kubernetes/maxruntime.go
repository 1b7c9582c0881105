package kubernetes

import (
	batchv1 "k8s.io/api/batch/v1"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// applyMaxRuntime sets the Job's activeDeadlineSeconds from the workload's
// max_runtime (rounded up to whole seconds), so Kubernetes stops the Job
// when the promise the hub's backfill relies on runs out. The deadline
// counts from the Job's start, or from its resumption when Kueue unsuspends
// it. Without max_runtime the Job has no deadline.
func applyMaxRuntime(job *batchv1.Job, w *meridianv1.Workload) {
	mr := w.GetMaxRuntime()
	if mr == nil || mr.CheckValid() != nil || mr.AsDuration() <= 0 {
		return
	}
	secs := mr.GetSeconds()
	if mr.GetNanos() > 0 {
		secs++
	}
	job.Spec.ActiveDeadlineSeconds = ptr(secs)
}
