package natsbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meridian-gpu/meridian/internal/telemetry"
)

// Delivery is one message handed to a Handler.
type Delivery struct {
	Subject string
	// Cluster is the subject's last token.
	Cluster string
	// MsgID is the publisher's Nats-Msg-Id (the dispatch or event id).
	MsgID   string
	Payload []byte
	// NumDelivered is 1 on the first delivery and grows on each redelivery.
	NumDelivered uint64
	// StreamSeq is the message's sequence in its stream.
	StreamSeq uint64
	// Published is when the stream stored the message.
	Published time.Time
}

// Handler processes one delivery. With tracing on (WithTracerProvider),
// ctx carries the delivery's consumer span, a child of the span the
// publisher sent in the message headers. nil acks it; an error naks it for
// redelivery after a backoff; an error wrapping ErrPermanent terminates it.
// Handlers of one consumer are called one at a time unless the consumer
// was started WithHandlers(n), n > 1. A handler must be idempotent: any
// message can arrive more than once.
type Handler func(ctx context.Context, d Delivery) error

// Decoded adapts a typed handler: decode turns the payload into T, and a
// decode error terminates the message (it would fail the same way forever).
func Decoded[T any](decode func([]byte) (T, error), h func(ctx context.Context, d Delivery, v T) error) Handler {
	return func(ctx context.Context, d Delivery) error {
		v, err := decode(d.Payload)
		if err != nil {
			return Permanent(fmt.Errorf("decode %s message %s: %w", d.Subject, d.MsgID, err))
		}
		return h(ctx, d, v)
	}
}

// Subscription is a running consumer or subscription. It stops when its
// context ends, when Stop is called, or when the Bus closes.
type Subscription struct {
	once   sync.Once
	cancel context.CancelFunc
	done   chan struct{}

	// caughtUp is closed once a replaying watch has handed over what its
	// stream held when it began (WatchAdverts); nil for the others.
	caughtUp     chan struct{}
	caughtUpOnce sync.Once
}

// CaughtUp is closed once the subscription has handed its callback every
// message its stream held when it began (for WatchAdverts: the latest
// advertisement of every cluster), so that a reader can tell "no cluster
// yet" from "not read yet". For subscriptions that replay nothing it is
// closed from the start.
func (s *Subscription) CaughtUp() <-chan struct{} {
	if s.caughtUp == nil {
		return closedChan
	}
	return s.caughtUp
}

func (s *Subscription) markCaughtUp() {
	s.caughtUpOnce.Do(func() { close(s.caughtUp) })
}

func (s *Subscription) isCaughtUp() bool {
	select {
	case <-s.CaughtUp():
		return true
	default:
		return false
	}
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Stop ends the subscription and waits until its handler is no longer
// being called. It is idempotent.
func (s *Subscription) Stop() {
	s.once.Do(s.cancel)
	<-s.done
}

// Done is closed once the subscription has stopped.
func (s *Subscription) Done() <-chan struct{} { return s.done }

// newSub registers a subscription bound to ctx. The caller starts the
// consumer with the returned context and then calls run with its stop
// function, or abort if starting failed.
func (b *Bus) newSub(ctx context.Context) (*Subscription, context.Context, error) {
	sctx, cancel := context.WithCancel(ctx)
	s := &Subscription{cancel: cancel, done: make(chan struct{})}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		cancel()
		return nil, nil, errors.New("natsbus: bus is closed")
	}
	b.subs[s] = struct{}{}
	return s, sctx, nil
}

// run calls stop once the subscription's context ends.
func (b *Bus) run(s *Subscription, sctx context.Context, stop func()) {
	go func() {
		<-sctx.Done()
		stop()
		b.forget(s)
	}()
}

// abort unregisters a subscription whose consumer never started.
func (b *Bus) abort(s *Subscription) {
	s.once.Do(s.cancel)
	b.forget(s)
}

func (b *Bus) forget(s *Subscription) {
	b.mu.Lock()
	delete(b.subs, s)
	b.mu.Unlock()
	close(s.done)
}

func stopConsume(cc jetstream.ConsumeContext) func() {
	return func() {
		cc.Stop()
		<-cc.Closed()
	}
}

// nakDelay is base * 2^(n-1), capped at max.
func (b *Bus) nakDelay(numDelivered uint64) time.Duration {
	d := b.opts.nakBase
	for i := uint64(1); i < numDelivered && d < b.opts.nakMax; i++ {
		d *= 2
	}
	return min(d, b.opts.nakMax)
}

// ConsumeOption configures one consumer.
type ConsumeOption func(*consumeOptions) error

type consumeOptions struct {
	handlers int
}

// MaxHandlers bounds WithHandlers.
const MaxHandlers = 1024

// WithHandlers runs up to n handler calls at the same time, so one slow
// message (a launch that waits on its backend) does not hold up the
// others. Each message is still acked, naked or terminated by its own
// handler's result. Messages are handed out in stream order but may finish
// in any order; a handler that needs order per key must serialize itself.
func WithHandlers(n int) ConsumeOption {
	return func(o *consumeOptions) error {
		if n < 1 || n > MaxHandlers {
			return fmt.Errorf("natsbus: handlers %d must be between 1 and %d", n, MaxHandlers)
		}
		o.handlers = n
		return nil
	}
}

// ConsumeDispatches delivers cluster's dispatches to h through the durable
// consumer dispatch-<cluster>, starting with the oldest unacknowledged one.
// It returns once the consumer is running.
//
// It binds to the consumer as it exists on the server (the hub makes it
// when the cluster is registered, EnsureDispatchConsumer), which is all a
// least-privilege agent credential allows. Only when the consumer does not
// exist yet does it create it, which needs the right to (a development
// setup without per-cluster credentials); call EnsureStreams first there.
func (b *Bus) ConsumeDispatches(ctx context.Context, cluster string, h Handler, opts ...ConsumeOption) (*Subscription, error) {
	if h == nil {
		return nil, errors.New("natsbus: handler is nil")
	}
	co, err := consumeOpts(opts)
	if err != nil {
		return nil, err
	}
	name, err := DispatchConsumer(cluster)
	if err != nil {
		return nil, err
	}
	cons, err := b.js.Consumer(ctx, StreamDispatch, name)
	switch {
	case err == nil:
	case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
		if cons, err = b.createDispatchConsumer(ctx, cluster); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("natsbus: look up consumer %s on %s: %w", name, StreamDispatch, err)
	}
	return b.startConsume(ctx, cons, name, h, co)
}

// CreateAttemptTimeout bounds ConsumeDispatches' attempt to create a
// missing consumer: a credential without the right gets no answer at all
// (NATS reports the violation asynchronously), only this timeout.
const CreateAttemptTimeout = 5 * time.Second

func (b *Bus) createDispatchConsumer(ctx context.Context, cluster string) (jetstream.Consumer, error) {
	cctx, cancel := context.WithTimeout(ctx, CreateAttemptTimeout)
	defer cancel()
	cons, err := b.js.CreateOrUpdateConsumer(cctx, StreamDispatch, b.dispatchConsumerConfig(cluster))
	name, _ := DispatchConsumer(cluster)
	switch {
	case err == nil:
		awaitConsumerLeader(ctx, cons)
		return cons, nil
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, fmt.Errorf("natsbus: consumer %s: stream %s missing (call EnsureStreams): %w", name, StreamDispatch, err)
	case ctx.Err() == nil && cctx.Err() != nil, errors.Is(err, nats.ErrTimeout):
		return nil, fmt.Errorf("natsbus: consumer %s does not exist and this connection could not create it "+
			"(no answer: a cluster credential may not create consumers); register the cluster on the hub "+
			"(meridianctl clusters register %s), which creates it: %w", name, cluster, err)
	}
	return nil, fmt.Errorf("natsbus: consumer %s on %s: %w", name, StreamDispatch, err)
}

func (b *Bus) dispatchConsumerConfig(cluster string) jetstream.ConsumerConfig {
	subj, _ := DispatchSubject(cluster)
	name, _ := DispatchConsumer(cluster)
	return b.consumerConfig(name, subj)
}

func (b *Bus) consumerConfig(durable, filter string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       durable,
		Description:   "meridian " + filter,
		FilterSubject: filter,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       b.opts.ackWait,
		MaxDeliver:    -1,
		MaxAckPending: b.opts.maxAckPending,
	}
}

// EnsureDispatchConsumer creates cluster's durable dispatch consumer, or
// updates it to this bus's ack wait and ack-pending limit. The hub calls it
// when a cluster is registered and at start for every registered cluster,
// so that agents, whose credentials may not create consumers, find theirs.
// It is idempotent and keeps the consumer's position: no dispatch is lost
// or redelivered by it.
func (b *Bus) EnsureDispatchConsumer(ctx context.Context, cluster string) error {
	if err := ValidateClusterID(cluster); err != nil {
		return err
	}
	cfg := b.dispatchConsumerConfig(cluster)
	if _, err := b.js.CreateOrUpdateConsumer(ctx, StreamDispatch, cfg); err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("natsbus: consumer %s: stream %s missing (call EnsureStreams): %w", cfg.Durable, StreamDispatch, err)
		}
		return fmt.Errorf("natsbus: ensure consumer %s on %s: %w", cfg.Durable, StreamDispatch, err)
	}
	return nil
}

// DispatchConsumerExists reports whether cluster's durable dispatch
// consumer exists. It needs only the lookup an agent's credential allows.
func (b *Bus) DispatchConsumerExists(ctx context.Context, cluster string) (bool, error) {
	name, err := DispatchConsumer(cluster)
	if err != nil {
		return false, err
	}
	_, err = b.js.Consumer(ctx, StreamDispatch, name)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
		return false, nil
	}
	return false, fmt.Errorf("natsbus: look up consumer %s on %s: %w", name, StreamDispatch, err)
}

// ConsumeEvents delivers every cluster's events to h through the hub's
// durable consumer hub-events.
func (b *Bus) ConsumeEvents(ctx context.Context, h Handler, opts ...ConsumeOption) (*Subscription, error) {
	return b.consume(ctx, StreamEvents, HubEventsConsumer, eventsRoot+"*", h, opts)
}

func consumeOpts(opts []ConsumeOption) (consumeOptions, error) {
	co := consumeOptions{handlers: 1}
	for _, opt := range opts {
		if err := opt(&co); err != nil {
			return co, err
		}
	}
	return co, nil
}

func (b *Bus) consume(ctx context.Context, stream, durable, filter string, h Handler, opts []ConsumeOption) (*Subscription, error) {
	if h == nil {
		return nil, errors.New("natsbus: handler is nil")
	}
	co, err := consumeOpts(opts)
	if err != nil {
		return nil, err
	}
	cons, err := b.js.CreateOrUpdateConsumer(ctx, stream, b.consumerConfig(durable, filter))
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("natsbus: consumer %s: stream %s missing (call EnsureStreams): %w", durable, stream, err)
		}
		return nil, fmt.Errorf("natsbus: consumer %s on %s: %w", durable, stream, err)
	}
	awaitConsumerLeader(ctx, cons)
	return b.startConsume(ctx, cons, durable, h, co)
}

// run2 starts delivering cons's messages to h.
func (b *Bus) startConsume(ctx context.Context, cons jetstream.Consumer, durable string, h Handler, co consumeOptions) (*Subscription, error) {
	sub, sctx, err := b.newSub(ctx)
	if err != nil {
		return nil, err
	}
	log := b.log.With("consumer", durable)
	// With several handlers, the client's callback hands each message to a
	// goroutine and blocks while all n are busy, so at most n run and the
	// rest stay buffered in the client (and unacked on the server).
	var inflight sync.WaitGroup
	slots := make(chan struct{}, co.handlers)
	onMsg := func(msg jetstream.Msg) { b.handle(sctx, log, msg, h) }
	if co.handlers > 1 {
		onMsg = func(msg jetstream.Msg) {
			select {
			case slots <- struct{}{}:
			case <-sctx.Done():
				return // stopping: leave it unacked, it will be redelivered
			}
			inflight.Add(1)
			go func() {
				defer func() { <-slots; inflight.Done() }()
				b.handle(sctx, log, msg, h)
			}()
		}
	}
	cc, err := cons.Consume(onMsg,
		jetstream.PullMaxMessages(max(b.opts.pullBatch, co.handlers)),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if sctx.Err() == nil {
				log.Warn("consume error", "err", err)
			}
		}),
	)
	if err != nil {
		b.abort(sub)
		return nil, fmt.Errorf("natsbus: consume %s: %w", durable, err)
	}
	stop := stopConsume(cc)
	b.run(sub, sctx, func() { stop(); inflight.Wait() })
	return sub, nil
}

func (b *Bus) handle(ctx context.Context, log *slog.Logger, msg jetstream.Msg, h Handler) {
	if ctx.Err() != nil {
		return // stopping: leave it unacked, it will be redelivered
	}
	d := Delivery{Subject: msg.Subject(), Cluster: clusterOf(msg.Subject()), MsgID: msg.Headers().Get(jetstream.MsgIDHeader), Payload: msg.Data()}
	if md, err := msg.Metadata(); err == nil {
		d.NumDelivered, d.StreamSeq, d.Published = md.NumDelivered, md.Sequence.Stream, md.Timestamp
	}
	hctx, span := b.startProcess(ctx, msg.Headers(), d.Subject, d.MsgID, d.NumDelivered)
	defer span.End()
	stop := keepInProgress(msg, b.opts.ackWait/3)
	err := safeCall(hctx, h, d)
	stop()
	telemetry.Fail(span, err)
	switch {
	case err == nil:
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if aerr := msg.DoubleAck(actx); aerr != nil {
			log.Warn("ack failed; the message will be redelivered", "msg_id", d.MsgID, "err", aerr)
		}
		cancel()
	case errors.Is(err, ErrPermanent):
		log.Error("handler failed permanently; terminating message", "msg_id", d.MsgID, "subject", d.Subject, "err", err)
		if terr := msg.TermWithReason(err.Error()); terr != nil {
			log.Warn("term failed", "msg_id", d.MsgID, "err", terr)
		}
	default:
		delay := b.nakDelay(d.NumDelivered)
		log.Warn("handler failed; will redeliver", "msg_id", d.MsgID, "delivery", d.NumDelivered, "delay", delay, "err", err)
		if nerr := msg.NakWithDelay(delay); nerr != nil {
			log.Warn("nak failed; redelivery after ack wait", "msg_id", d.MsgID, "err", nerr)
		}
	}
}

// keepInProgress tells the server every interval that msg is still being
// handled, so a handler that waits (for a launch slot behind a
// rate-limited backend, or a slow backend) is not redelivered while it
// runs; redelivery is for handlers that died. It returns the function
// that stops it.
func keepInProgress(msg jetstream.Msg, every time.Duration) (stop func()) {
	if every <= 0 {
		return func() {}
	}
	var (
		mu      sync.Mutex
		stopped bool
		t       *time.Timer
	)
	tick := func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		_ = msg.InProgress()
		t.Reset(every)
	}
	mu.Lock()
	t = time.AfterFunc(every, tick)
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}

// safeCall turns a handler panic into an error so one bad message cannot
// kill the consumer.
func safeCall(ctx context.Context, h Handler, d Delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panic on %s message %s: %v", d.Subject, d.MsgID, r)
		}
	}()
	return h(ctx, d)
}

// WatchAdverts calls fn with each cluster's latest advert, then with every
// new one. It keeps no state on the server (an ordered, ephemeral consumer)
// and resumes by itself after reconnects. fn is called one at a time. The
// subscription's CaughtUp is closed once fn has had every cluster's latest.
func (b *Bus) WatchAdverts(ctx context.Context, fn func(cluster string, payload []byte)) (*Subscription, error) {
	if fn == nil {
		return nil, errors.New("natsbus: advert callback is nil")
	}
	cons, err := b.js.OrderedConsumer(ctx, StreamAdvert, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{advertRoot + "*"},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("natsbus: watch adverts: %w", err)
	}
	sub, sctx, err := b.newSub(ctx)
	if err != nil {
		return nil, err
	}
	sub.caughtUp = make(chan struct{})
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		if sctx.Err() != nil {
			return
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					b.log.Error("advert callback panic", "subject", msg.Subject(), "panic", r)
				}
			}()
			fn(clusterOf(msg.Subject()), msg.Data())
		}()
		// The server counts, with each message, the ones still to come
		// (for this policy: the other subjects' latest): none left means
		// the replay is over. Once it is, the count is not read again.
		if !sub.isCaughtUp() {
			if md, err := msg.Metadata(); err == nil && md.NumPending == 0 {
				sub.markCaughtUp()
			}
		}
	})
	if err != nil {
		b.abort(sub)
		return nil, fmt.Errorf("natsbus: watch adverts: %w", err)
	}
	if info := cons.CachedInfo(); info != nil && info.NumPending == 0 {
		sub.markCaughtUp() // the stream held no advertisement
	}
	b.run(sub, sctx, stopConsume(cc))
	return sub, nil
}

// SubscribeHeartbeats calls fn for every heartbeat received on core NATS.
// Heartbeats sent while this subscriber was away are not replayed.
func (b *Bus) SubscribeHeartbeats(ctx context.Context, fn func(cluster string, payload []byte)) (*Subscription, error) {
	if fn == nil {
		return nil, errors.New("natsbus: heartbeat callback is nil")
	}
	ns, err := b.nc.Subscribe(heartbeatRoot+"*", func(m *nats.Msg) {
		defer func() {
			if r := recover(); r != nil {
				b.log.Error("heartbeat callback panic", "subject", m.Subject, "panic", r)
			}
		}()
		fn(clusterOf(m.Subject), m.Data)
	})
	if err != nil {
		return nil, fmt.Errorf("natsbus: subscribe heartbeats: %w", err)
	}
	// Make sure the server has the interest before returning. nats.go
	// refuses to flush with a context that has no deadline, and the
	// subscription's own context usually has none, so bound the flush.
	fctx, fcancel := context.WithTimeout(ctx, 10*time.Second)
	err = b.nc.FlushWithContext(fctx)
	fcancel()
	if err != nil {
		_ = ns.Unsubscribe()
		return nil, fmt.Errorf("natsbus: subscribe heartbeats: %w", err)
	}
	sub, sctx, err := b.newSub(ctx)
	if err != nil {
		_ = ns.Unsubscribe()
		return nil, err
	}
	b.run(sub, sctx, func() { _ = ns.Unsubscribe() })
	return sub, nil
}

// DispatchBacklog returns how many of cluster's dispatches are not yet
// acknowledged: waiting for delivery plus delivered but unacked. It needs
// the consumer to exist (ConsumeDispatches has run once).
func (b *Bus) DispatchBacklog(ctx context.Context, cluster string) (uint64, error) {
	name, err := DispatchConsumer(cluster)
	if err != nil {
		return 0, err
	}
	cons, err := b.js.Consumer(ctx, StreamDispatch, name)
	if err != nil {
		return 0, fmt.Errorf("natsbus: consumer %s: %w", name, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("natsbus: consumer %s info: %w", name, err)
	}
	return info.NumPending + uint64(info.NumAckPending), nil
}
