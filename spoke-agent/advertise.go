package agent

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/internal/protofast"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
)

// notifyChange asks the advertise loop to send a delta soon.
func (a *Agent) notifyChange() { poke(a.changed) }

// poke signals a loop through a channel of capacity one without waiting:
// a signal already pending covers this one.
func poke(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (a *Agent) heartbeatLoop(ctx context.Context) {
	vanished := false
	for {
		// A connector that stops vanishing is a returning cluster: it
		// registers again like after a reconnect.
		if v, ok := a.conn.(Vanisher); ok {
			now := v.Vanished()
			if vanished && !now {
				poke(a.rejoin)
			}
			vanished = now
		}
		a.sendHeartbeat(ctx)
		t := time.NewTimer(time.Duration(a.hbInterval.Load()))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (a *Agent) sendHeartbeat(ctx context.Context) {
	if a.silent() {
		return
	}
	hb := &agentv1.Heartbeat{
		ClusterId: a.cfg.ClusterID, Seq: a.hbSeq.Add(1), SentAt: timestamppb.New(a.cfg.Now()),
		SessionId: a.session, AdvertisementSeq: a.lastAdvSeq(),
	}
	for _, h := range a.Held() {
		hb.Dispatches = append(hb.Dispatches, &agentv1.RunningDispatch{DispatchId: h.DispatchID, WorkloadId: h.WorkloadID, State: h.State})
	}
	payload, err := protofast.MarshalDeterministic(hb)
	if err == nil {
		err = a.bus.PublishHeartbeat(ctx, a.cfg.ClusterID, payload)
	}
	if err != nil {
		a.m.publishErrors.WithLabelValues("heartbeat").Inc()
		a.log.Debug("heartbeat not sent", "err", err)
		return
	}
	a.m.heartbeats.Inc()
	now := a.cfg.Now()
	a.noteSilence(now)
	a.lastBeat.Store(now.UnixNano())
}

// lastAdvSeq never waits for an advertisement in flight.
func (a *Agent) lastAdvSeq() uint64 { return a.sentSeq.Load() }

func (a *Agent) advertLoop(ctx context.Context) {
	a.sendFull(ctx)
	var lastFull time.Time // the last full advertisement sent on a hub's request
	full := time.NewTimer(time.Duration(a.advInterval.Load()))
	defer full.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-full.C:
			a.sendFull(ctx)
			full.Reset(time.Duration(a.advInterval.Load()))
		case <-a.askedFull:
			// Several hubs may ask at once: one full advertisement a
			// second at most answers them all.
			if time.Since(lastFull) >= time.Second {
				a.m.adverts.WithLabelValues("asked").Inc()
				a.sendFull(ctx)
				lastFull = time.Now()
			}
		case <-a.changed:
			t := time.NewTimer(a.cfg.ChangeDelay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			if a.cfg.FullAdvertOnChange {
				a.sendFull(ctx)
			} else {
				a.sendDelta(ctx)
			}
		}
	}
}

// sendFull publishes a full Advertisement on the ADVERT stream.
func (a *Agent) sendFull(ctx context.Context) {
	if a.silent() {
		return
	}
	a.advMu.Lock()
	defer a.advMu.Unlock()
	inv, err := a.conn.Inventory(ctx)
	if a.m.connectorError("inventory", err) != nil {
		a.log.Warn("inventory failed; advertisement skipped", "err", err)
		return
	}
	seq := a.advSeq.Add(1)
	ad := &agentv1.Advertisement{
		ClusterId: a.cfg.ClusterID, Seq: seq, SentAt: timestamppb.New(a.cfg.Now()), Connector: connectorKind(a.conn.Kind()),
		Labels: inv.Labels, FractionalModes: inv.FractionalModes, Nodes: inv.Nodes, SessionId: a.session,
		MigStrategy: inv.MIGStrategy, Capabilities: []string{agentv1.CapabilityDispatchBatch},
	}
	payload, err := protofast.MarshalDeterministic(ad)
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = a.bus.PublishAdvert(pctx, a.cfg.ClusterID, payload)
		cancel()
	}
	if err != nil {
		a.m.publishErrors.WithLabelValues("advert").Inc()
		a.log.Debug("advertisement not stored", "err", err)
		a.lastNodes = nil
		return
	}
	// A connector never changes a node it returned (Connector.Inventory),
	// so the nodes themselves are kept to compare the next ones with.
	a.lastNodes = make(map[string]*agentv1.Node, len(inv.Nodes))
	for _, n := range inv.Nodes {
		a.lastNodes[n.GetName()] = n
	}
	a.sentSeq.Store(seq)
	a.m.adverts.WithLabelValues("full").Inc()
}

// sendDelta publishes the nodes that changed since the last advertisement
// or delta on the advert subject, where the hub's fleet registry tells
// deltas from full snapshots; without a base it sends a full advertisement.
// (A delta may then be the stream's last message; a hub that starts on it
// waits for the next full snapshot, at most AdvertiseInterval away.)
func (a *Agent) sendDelta(ctx context.Context) {
	if a.silent() {
		return
	}
	a.advMu.Lock()
	if a.lastNodes == nil {
		a.advMu.Unlock()
		a.sendFull(ctx)
		return
	}
	defer a.advMu.Unlock()
	inv, err := a.conn.Inventory(ctx)
	if a.m.connectorError("inventory", err) != nil {
		a.log.Warn("inventory failed; delta skipped", "err", err)
		return
	}
	d := &agentv1.AdvertisementDelta{ClusterId: a.cfg.ClusterID, BaseSeq: a.sentSeq.Load(), SentAt: timestamppb.New(a.cfg.Now()), SessionId: a.session}
	// One set reused from delta to delta: a delta goes out at every
	// change of capacity, and a fresh map each time was most of what
	// comparing the nodes allocated.
	if a.seenNodes == nil {
		a.seenNodes = make(map[string]bool, len(inv.Nodes))
	}
	seen := a.seenNodes
	clear(seen)
	for _, n := range inv.Nodes {
		seen[n.GetName()] = true
		// The generated EqualVT, not proto.Equal or comparing encodings:
		// an agent compares every node at every change, and this neither
		// reflects nor allocates (and returns at once for the same
		// *Node, which a connector may hand back for an unchanged node).
		if old, ok := a.lastNodes[n.GetName()]; !ok || !n.EqualVT(old) {
			d.UpsertedNodes = append(d.UpsertedNodes, n)
		}
	}
	for name := range a.lastNodes {
		if !seen[name] {
			d.RemovedNodes = append(d.RemovedNodes, name)
		}
	}
	if len(d.UpsertedNodes) == 0 && len(d.RemovedNodes) == 0 {
		return
	}
	d.Seq = a.advSeq.Add(1)
	payload, err := protofast.MarshalDeterministic(d)
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = a.bus.PublishAdvert(pctx, a.cfg.ClusterID, payload)
		cancel()
	}
	if err != nil {
		a.m.publishErrors.WithLabelValues("delta").Inc()
		a.log.Debug("delta not sent; the next change sends a full advertisement", "err", err)
		a.lastNodes = nil
		return
	}
	for _, n := range d.UpsertedNodes {
		a.lastNodes[n.GetName()] = n
	}
	for _, name := range d.RemovedNodes {
		delete(a.lastNodes, name)
	}
	a.sentSeq.Store(d.Seq)
	a.m.adverts.WithLabelValues("delta").Inc()
}
