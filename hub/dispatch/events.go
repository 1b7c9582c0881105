package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-gpu/meridian/hub/leader"
	"github.com/meridian-gpu/meridian/hub/store"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

type eventMsg struct{ *agentv1.DispatchEvent }

func decodeEvent(b []byte) (*eventMsg, error) {
	ev := &agentv1.DispatchEvent{}
	if err := proto.Unmarshal(b, ev); err != nil {
		return nil, err
	}
	if ev.GetDispatchId() == "" {
		return nil, errors.New("dispatch_id: is empty")
	}
	if ev.GetType() == agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_UNSPECIFIED {
		return nil, errors.New("type: is unspecified")
	}
	return &eventMsg{ev}, nil
}

// handleEvent applies one agent event with fenced compare-and-swap writes,
// retrying on conflicts. Unknown and stale dispatch ids are acknowledged and
// ignored; a stale dispatch the agent still runs is cancelled. A lost fence
// returns an error so the message is redelivered to the next leader.
func (l *Loop) handleEvent(t *term, d natsbus.Delivery, ev *agentv1.DispatchEvent) error {
	l.m.events.WithLabelValues(ev.GetType().String()).Inc()
	for attempt := 0; attempt < 20; attempt++ {
		if t.ctx.Err() != nil {
			return fmt.Errorf("term ended: %w", t.ctx.Err())
		}
		err := l.applyEvent(t, d, ev)
		switch {
		case err == nil:
			return nil
		case leader.IsNotLeader(err):
			t.cancel()
			return err
		case store.IsConflict(err):
			continue
		default:
			return err
		}
	}
	return fmt.Errorf("event %s for dispatch %s: still conflicting after 20 attempts", ev.GetType(), ev.GetDispatchId())
}

func (l *Loop) applyEvent(t *term, d natsbus.Delivery, ev *agentv1.DispatchEvent) error {
	ctx, cancel := context.WithTimeout(t.ctx, 5*time.Second)
	defer cancel()
	now := l.clock()
	id := ev.GetDispatchId()
	cluster := ev.GetClusterId()
	if cluster == "" {
		cluster = d.Cluster
	}
	stillRuns := ev.GetType() == agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_ACCEPTED || ev.GetType() == agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_RUNNING
	stale := func(why string) error {
		l.m.staleEvents.Inc()
		l.log.Info("ignored event for a dispatch that is not current", "dispatch", id, "type", ev.GetType().String(), "cluster", cluster, "why", why)
		if stillRuns {
			l.sendCancel(t, cluster, id, ev.GetWorkloadId(), "dispatch is no longer current", false)
		}
		return nil
	}
	rk, err := DispatchKey(id)
	if err != nil {
		return stale(err.Error())
	}
	rb, rrev, err := l.st.Get(ctx, rk)
	if store.IsNotFound(err) {
		return stale("no dispatch record")
	}
	if err != nil {
		return err
	}
	r, err := decodeRecord(rb)
	if err != nil {
		return stale(err.Error())
	}
	if r.Cluster != cluster {
		return stale(fmt.Sprintf("dispatch belongs to cluster %s", r.Cluster))
	}
	wk, err := WorkloadKey(r.WorkloadID)
	if err != nil {
		return stale(err.Error())
	}
	wb, wrev, err := l.st.Get(ctx, wk)
	if store.IsNotFound(err) {
		return stale("workload is gone")
	}
	if err != nil {
		return err
	}
	w, err := decodeWorkload(wb)
	if err != nil {
		return stale(err.Error())
	}
	if w.GetStatus().GetDispatchId() != id || !active(w.GetStatus().GetPhase()) {
		return stale("workload points at another dispatch")
	}

	when := now
	if ev.GetTime() != nil {
		when = ev.GetTime().AsTime()
	}
	st := w.Status
	var ops []store.Op
	ackRecord := func() error {
		if r.Acked {
			return nil
		}
		r.Acked, r.AckedAt = true, now
		b, err := encodeRecord(r)
		if err != nil {
			return err
		}
		ops = append(ops, store.PutIfModRev(rk, b, rrev))
		return nil
	}
	switch ev.GetType() {
	case agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_ACCEPTED:
		if st.Phase == meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED {
			st.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_ACCEPTED
		} else if r.Acked {
			return nil // duplicate
		}
		if err := ackRecord(); err != nil {
			return err
		}
	case agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_RUNNING:
		if st.Phase == meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING && r.Acked {
			return nil
		}
		st.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING
		st.StartTime = tsOf(when)
		if err := ackRecord(); err != nil {
			return err
		}
	case agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_SUCCEEDED, agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_FAILED,
		agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_CANCELLED:
		switch ev.GetType() {
		case agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_SUCCEEDED:
			st.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED
		case agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_FAILED:
			st.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_FAILED
		default:
			st.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED
		}
		st.EndTime = tsOf(when)
		if ev.ExitCode != nil {
			st.ExitCode = proto.Int32(ev.GetExitCode())
		}
		st.Message = clip(ev.GetReason(), 1024)
		st.PendingReason = ""
		ops = append(ops, store.Delete(rk, rrev))
		l.finalAccrual(t, w, r, when)
	case agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_PREEMPTED, agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_REJECTED:
		rejected := ev.GetType() == agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_REJECTED
		why := fmt.Sprintf("preempted on cluster %s", cluster)
		if rejected {
			why = fmt.Sprintf("cluster %s rejected the dispatch", cluster)
		}
		if ev.GetReason() != "" {
			why += ": " + ev.GetReason()
		}
		if !rejected {
			l.finalAccrual(t, w, r, when)
		}
		m, err := l.requeue(&wl{key: wk, modRev: wrev, w: w}, &rec{key: rk, modRev: rrev, r: r}, now, why, rejected, true)
		if err != nil {
			return err
		}
		_, err = l.commit(t, m.ops...)
		if err == nil {
			l.log.Info("requeued", "workload", r.WorkloadID, "dispatch", id, "why", why)
		}
		return err
	default:
		return nil
	}
	b, err := l.stamp(w, now)
	if err != nil {
		return err
	}
	ops = append([]store.Op{store.PutIfModRev(wk, b, wrev)}, ops...)
	_, err = l.commit(t, ops...)
	return err
}
