package agent

import (
	"context"
	"errors"
	"sync"

	"go.opentelemetry.io/otel/trace"

	"github.com/meridian-gpu/meridian/internal/telemetry"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// A batch's dispatches are launched by launch workers that live as long
// as the agent (LaunchParallelism of them, started by Run), and the
// batch's handler then waits once for all their answers. A goroutine per
// dispatch, each waiting for its own answer, cost the agent's process a
// quarter of its CPU in the Go scheduler and a tenth growing the new
// goroutines' stacks to a launch's depth (docs/design/cost-per-workload.md,
// "The eighth round").
//
// A dispatch's per-id lock is held while it is decided and launched, so
// that a cancel never overtakes the launch it cancels, and released
// before its answer is stored: what comes after (a redelivery answered
// again, a cancel of the launched run) only queues events behind the
// answer, which the outbox publishes in order.

// launchJob is one dispatch of a batch on its way through a worker.
type launchJob struct {
	ctx  context.Context
	span trace.Span
	d    *agentv1.Dispatch
	wg   *sync.WaitGroup
	item *outItem // the answer to wait for; nil when there is none
	err  error
}

// launchWorker runs jobs until ctx ends.
func (a *Agent) launchWorker(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-a.launchq:
			a.runJob(j, true)
		}
	}
}

// runJob decides and launches one job. A worker does not wait for an id
// another message holds (a redelivery handled side by side, rare): that
// job waits in a goroutine of its own, as every dispatch once did, so the
// workers stay free for the others.
func (a *Agent) runJob(j *launchJob, worker bool) {
	id := j.d.GetDispatchId()
	unlock, ok := a.perID.tryLock(id)
	if !ok {
		if worker {
			go a.runJob(j, false)
			return
		}
		unlock = a.perID.lock(id)
	}
	defer j.wg.Done()
	j.item, j.err = a.startDispatch(j.ctx, j.d)
	unlock()
}

// handleBatch handles the dispatches of a batch side by side, as single
// dispatches delivered together would be (the launch slots bound how many
// reach the backend at once), and returns once each has its answer
// stored. A dispatch that fails for now fails the batch, which is then
// delivered again: those already answered are answered the same way
// again, never launched twice. One that can never be handled is dropped
// alone.
func (a *Agent) handleBatch(ctx context.Context, subject string, b *agentv1.DispatchBatch) error {
	ds := b.GetDispatches()
	jobs := make([]launchJob, len(ds))
	var wg sync.WaitGroup
	wg.Add(len(ds))
	for i, d := range ds {
		a.m.received.WithLabelValues("dispatch").Inc()
		// A single dispatch's trace comes in the message headers; a
		// batched one's in its workload.
		sc, _ := telemetry.ParseTraceParent(d.GetWorkload().GetTraceParent())
		if d.GetWorkload() != nil {
			d.Workload.TraceParent = ""
		}
		dctx, span := a.bus.StartItemProcess(ctx, sc, subject, d.GetDispatchId())
		j := &jobs[i]
		*j = launchJob{ctx: dctx, span: span, d: d, wg: &wg}
		select {
		case a.launchq <- j:
		case <-ctx.Done():
			j.err = ctx.Err()
			wg.Done()
		case <-a.stopped:
			j.err = errors.New("agent stopping; leaving the dispatch for redelivery")
			wg.Done()
		}
	}
	wg.Wait()
	// One deadline for the batch's answers, counted from the last launch.
	expired, stop := a.answerDeadline()
	defer stop()
	var retry error
	for i := range jobs {
		j := &jobs[i]
		if j.err == nil && j.item != nil {
			j.err = a.waitStoredBy(ctx, j.item, expired)
		}
		telemetry.Fail(j.span, j.err)
		j.span.End()
		switch {
		case j.err == nil:
		case errors.Is(j.err, natsbus.ErrPermanent):
			a.log.Error("dropping one dispatch of a batch", "dispatch_id", j.d.GetDispatchId(), "err", j.err)
		case retry == nil:
			retry = j.err
		}
	}
	return retry
}
