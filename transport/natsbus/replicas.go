package natsbus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meridian-gpu/meridian/internal/ctxtime"
)

// MaxStreamReplicas is the most replicas JetStream keeps of a stream.
const MaxStreamReplicas = 5

// WithStreamReplicas makes EnsureStreams create the DISPATCH, EVENTS and
// ADVERT streams with n replicas, or change existing ones to n: 3 on a
// three-node NATS cluster, so that a stream and its durable consumers
// (which inherit the stream's replica count) outlive the loss of one node.
// n must be 1..MaxStreamReplicas and at most the cluster's size; a
// standalone server takes only 1. Without it a new stream has one replica
// and an existing one keeps its own, so agents, which never set it, do not
// undo the hub's choice.
func WithStreamReplicas(n int) Option {
	return func(o *options) error {
		if n < 1 || n > MaxStreamReplicas {
			return fmt.Errorf("natsbus: stream replicas %d out of range 1..%d", n, MaxStreamReplicas)
		}
		o.streamReplicas = n
		return nil
	}
}

// keepReplicas gives cfg the replica count of the existing stream of its
// name when this bus has none of its own (WithStreamReplicas).
func (b *Bus) keepReplicas(ctx context.Context, cfg *jetstream.StreamConfig) error {
	if b.opts.streamReplicas != 0 {
		return nil
	}
	st, err := b.js.Stream(ctx, cfg.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("natsbus: look up stream %s: %w", cfg.Name, err)
	}
	cfg.Replicas = st.CachedInfo().Config.Replicas
	return nil
}

// ConsumerLeaderWait bounds awaitConsumerLeader.
const ConsumerLeaderWait = 5 * time.Second

// awaitConsumerLeader waits, at most ConsumerLeaderWait, until cons (just
// created) answers, which on a NATS cluster means its replicas have
// elected a leader. A pull sent before then gets "no responders", and the
// client waits out a missed heartbeat (30 s) before it pulls again: a new
// agent's first dispatches would wait that long.
func awaitConsumerLeader(ctx context.Context, cons jetstream.Consumer) {
	deadline := time.Now().Add(ConsumerLeaderWait)
	for {
		ictx, cancel := context.WithTimeout(ctx, time.Second)
		info, err := cons.Info(ictx)
		cancel()
		if err == nil && (info.Cluster == nil || info.Cluster.Leader != "" || len(info.Cluster.Replicas) == 0) {
			return
		}
		if time.Now().After(deadline) {
			return
		}
		if !ctxtime.Sleep(ctx, 50*time.Millisecond) {
			return
		}
	}
}
