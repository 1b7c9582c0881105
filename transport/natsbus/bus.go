package natsbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/meridian-gpu/meridian/internal/telemetry"
)

// Defaults for Options.
const (
	DefaultDuplicateWindow = 2 * time.Minute
	DefaultAckWait         = 30 * time.Second
	DefaultMaxAge          = 7 * 24 * time.Hour
	DefaultNakBase         = 250 * time.Millisecond
	DefaultNakMax          = 30 * time.Second
	DefaultMaxAckPending   = 1000
	DefaultPullBatch       = 16
	DefaultReconnectWait   = 250 * time.Millisecond
	// DefaultAsyncPublishTimeout bounds the wait for one async publish's
	// ack from the stream.
	DefaultAsyncPublishTimeout = 5 * time.Second
)

// ErrPermanent marks a handler error that retrying cannot fix (for example
// an undecodable payload): the message is terminated, not redelivered.
var ErrPermanent = errors.New("permanent failure")

// Permanent wraps err so that the consumer terminates the message.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrPermanent, err)
}

type options struct {
	dupWindow     time.Duration
	ackWait       time.Duration
	maxAge        time.Duration
	nakBase       time.Duration
	nakMax        time.Duration
	maxAckPending int
	pullBatch     int
	reconnectWait time.Duration
	name          string
	log           *slog.Logger
	// natsOpts are extra connection options (credentials, TLS), set by
	// the options in auth.go.
	natsOpts []nats.Option
	// tp traces publishes and deliveries (trace.go); nil: off.
	tp trace.TracerProvider
	// inboxPrefix replaces _INBOX for replies (WithInboxPrefix).
	inboxPrefix string
	// streamReplicas is the streams' replica count (WithStreamReplicas);
	// 0: keep an existing stream's, 1 for a new one.
	streamReplicas int
}

// Option configures Connect.
type Option func(*options) error

// WithDuplicateWindow sets the streams' Nats-Msg-Id dedupe window.
func WithDuplicateWindow(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("natsbus: duplicate window %s must be positive", d)
		}
		o.dupWindow = d
		return nil
	}
}

// WithAckWait sets how long a delivered message may stay unacknowledged
// before the server redelivers it.
func WithAckWait(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("natsbus: ack wait %s must be positive", d)
		}
		o.ackWait = d
		return nil
	}
}

// WithMaxAge bounds how long DISPATCH and EVENTS keep messages.
func WithMaxAge(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("natsbus: max age %s must be positive", d)
		}
		o.maxAge = d
		return nil
	}
}

// WithNakBackoff sets the redelivery delay after a handler error: base,
// doubling per delivery, capped at max.
func WithNakBackoff(base, max time.Duration) Option {
	return func(o *options) error {
		if base <= 0 || max < base {
			return fmt.Errorf("natsbus: nak backoff base %s, max %s: need 0 < base <= max", base, max)
		}
		o.nakBase, o.nakMax = base, max
		return nil
	}
}

// WithMaxAckPending caps unacknowledged messages per consumer.
func WithMaxAckPending(n int) Option {
	return func(o *options) error {
		if n <= 0 {
			return fmt.Errorf("natsbus: max ack pending %d must be positive", n)
		}
		o.maxAckPending = n
		return nil
	}
}

// WithPullBatch sets how many messages a consumer buffers client-side. Keep
// it small: buffered messages' ack wait is already running.
func WithPullBatch(n int) Option {
	return func(o *options) error {
		if n <= 0 {
			return fmt.Errorf("natsbus: pull batch %d must be positive", n)
		}
		o.pullBatch = n
		return nil
	}
}

// WithReconnectWait sets the pause between reconnect attempts.
func WithReconnectWait(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("natsbus: reconnect wait %s must be positive", d)
		}
		o.reconnectWait = d
		return nil
	}
}

// WithName names the connection (shown in server monitoring).
func WithName(name string) Option {
	return func(o *options) error { o.name = name; return nil }
}

// WithLogger sets the logger; the default drops logs.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l != nil {
			o.log = l
		}
		return nil
	}
}

// WithInboxPrefix makes the connection's reply subjects (request replies,
// JetStream acks and pulls) start with prefix instead of _INBOX. An agent
// uses ClusterInboxPrefix(cluster): its NATS user may subscribe only there,
// so no other cluster can read its replies.
func WithInboxPrefix(prefix string) Option {
	return func(o *options) error {
		if err := validInboxPrefix(prefix); err != nil {
			return err
		}
		o.inboxPrefix = prefix
		return nil
	}
}

// Bus is one NATS connection with JetStream. It is safe for concurrent use.
type Bus struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	opts options
	log  *slog.Logger

	mu     sync.Mutex
	subs   map[*Subscription]struct{}
	closed bool
}

// Connect dials url and returns a Bus that reconnects without limit. It
// fails if the first connection cannot be made before ctx ends.
func Connect(ctx context.Context, url string, opts ...Option) (*Bus, error) {
	if strings.TrimSpace(url) == "" {
		return nil, errors.New("natsbus: url is empty")
	}
	o := options{
		dupWindow: DefaultDuplicateWindow, ackWait: DefaultAckWait, maxAge: DefaultMaxAge,
		nakBase: DefaultNakBase, nakMax: DefaultNakMax, maxAckPending: DefaultMaxAckPending,
		pullBatch: DefaultPullBatch, reconnectWait: DefaultReconnectWait, name: "meridian",
		log: slog.New(slog.DiscardHandler),
	}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	b := &Bus{opts: o, log: o.log, subs: map[*Subscription]struct{}{}}
	nopts := []nats.Option{
		nats.Name(o.name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(o.reconnectWait),
		nats.ReconnectBufSize(-1), // publishes fail fast while disconnected; callers retry
		// Keep trying after the server refuses the credential: a rotated
		// .creds file (re-read at every attempt) may land after the old
		// credential was revoked, and the process must pick it up then.
		nats.IgnoreAuthErrorAbort(),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			b.log.Warn("nats disconnected", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			b.log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted())
		}),
		// Permission violations and revocations arrive asynchronously;
		// without this they would be silent.
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			b.log.Warn("nats error", "err", err)
		}),
	}
	if o.inboxPrefix != "" {
		nopts = append(nopts, nats.CustomInboxPrefix(o.inboxPrefix))
	}
	if dl, ok := ctx.Deadline(); ok {
		nopts = append(nopts, nats.Timeout(time.Until(dl)))
	}
	nopts = append(nopts, o.natsOpts...)
	nc, err := nats.Connect(url, nopts...)
	if err != nil {
		return nil, fmt.Errorf("natsbus: connect %s: %w", url, err)
	}
	// Async publishes (PublishEvents) always resolve: a lost ack becomes
	// an error after this long instead of a future that never completes.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(DefaultAsyncPublishTimeout))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("natsbus: jetstream: %w", err)
	}
	b.nc, b.js = nc, js
	return b, nil
}

// Conn is the underlying NATS connection.
func (b *Bus) Conn() *nats.Conn { return b.nc }

// JetStream is the underlying JetStream context.
func (b *Bus) JetStream() jetstream.JetStream { return b.js }

// Close stops every subscription and closes the connection. Unacknowledged
// messages are redelivered to the next consumer after the ack wait. It is
// idempotent.
func (b *Bus) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	subs := make([]*Subscription, 0, len(b.subs))
	for s := range b.subs {
		subs = append(subs, s)
	}
	b.mu.Unlock()
	for _, s := range subs {
		s.Stop()
	}
	b.nc.Close()
}

// StreamConfigs returns the stream definitions EnsureStreams applies.
func (b *Bus) StreamConfigs() []jetstream.StreamConfig {
	return []jetstream.StreamConfig{
		{
			Name:        StreamDispatch,
			Description: "hub to agent: dispatches and cancels, one subject per cluster",
			Subjects:    []string{dispatchRoot + "*"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			MaxAge:      b.opts.maxAge,
			Duplicates:  b.opts.dupWindow,
			Discard:     jetstream.DiscardOld,
			Replicas:    b.opts.streamReplicas,
		},
		{
			Name:        StreamEvents,
			Description: "agent to hub: workload state changes",
			Subjects:    []string{eventsRoot + "*"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			MaxAge:      b.opts.maxAge,
			Duplicates:  b.opts.dupWindow,
			Discard:     jetstream.DiscardOld,
			Replicas:    b.opts.streamReplicas,
		},
		{
			Name:              StreamAdvert,
			Description:       "agent to hub: capacity adverts, last value per cluster",
			Subjects:          []string{advertRoot + "*"},
			Retention:         jetstream.LimitsPolicy,
			Storage:           jetstream.FileStorage,
			MaxMsgsPerSubject: 1,
			Duplicates:        b.opts.dupWindow,
			Discard:           jetstream.DiscardOld,
			Replicas:          b.opts.streamReplicas,
		},
	}
}

// EnsureStreams creates the DISPATCH, EVENTS and ADVERT streams, or updates
// them to the current configuration. It is idempotent; hub and agents may
// both call it at start. A bus without WithStreamReplicas (an agent's)
// keeps an existing stream's replica count rather than setting it back
// to one.
func (b *Bus) EnsureStreams(ctx context.Context) error {
	for _, cfg := range b.StreamConfigs() {
		if err := b.keepReplicas(ctx, &cfg); err != nil {
			return err
		}
		if _, err := b.js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("natsbus: ensure stream %s: %w", cfg.Name, err)
		}
	}
	return nil
}

func validateMsgID(msgID string) error {
	if strings.TrimSpace(msgID) == "" {
		return errors.New("natsbus: msgID is empty; it is the dedupe key (use the dispatch or event id)")
	}
	if len(msgID) > 256 {
		return fmt.Errorf("natsbus: msgID is %d bytes, more than 256", len(msgID))
	}
	if strings.ContainsAny(msgID, "\r\n") {
		return fmt.Errorf("natsbus: msgID %q contains a line break", msgID)
	}
	return nil
}

// PublishDispatch stores payload on meridian.dispatch.<cluster> with
// Nats-Msg-Id = msgID and waits for the stream's acknowledgement. duplicate
// is true when the stream already held msgID within its dedupe window (the
// earlier copy stands). An error means the publish may or may not have
// been stored: retry with the same msgID. A sampled span in ctx is
// continued over the message's headers (WithTracerProvider).
func (b *Bus) PublishDispatch(ctx context.Context, cluster, msgID string, payload []byte) (bool, error) {
	subj, err := DispatchSubject(cluster)
	if err != nil {
		return false, err
	}
	return b.publish(ctx, subj, msgID, payload)
}

// PublishEvent stores payload on meridian.events.<cluster>, deduplicated by
// msgID like PublishDispatch.
func (b *Bus) PublishEvent(ctx context.Context, cluster, msgID string, payload []byte) (bool, error) {
	subj, err := EventsSubject(cluster)
	if err != nil {
		return false, err
	}
	return b.publish(ctx, subj, msgID, payload)
}

func (b *Bus) publish(ctx context.Context, subj, msgID string, payload []byte) (bool, error) {
	if err := validateMsgID(msgID); err != nil {
		return false, err
	}
	span, hdr := b.startSend(ctx, trace.SpanContextFromContext(ctx), subj, msgID)
	defer span.End()
	ack, err := b.js.PublishMsg(ctx, &nats.Msg{Subject: subj, Data: payload, Header: hdr}, jetstream.WithMsgID(msgID))
	if err != nil {
		err = fmt.Errorf("natsbus: publish %s id %s: %w", subj, msgID, err)
		telemetry.Fail(span, err)
		return false, err
	}
	return ack.Duplicate, nil
}

// PublishAdvert stores cluster's latest capacity advert; the ADVERT stream
// keeps only the last one per cluster.
func (b *Bus) PublishAdvert(ctx context.Context, cluster string, payload []byte) error {
	subj, err := AdvertSubject(cluster)
	if err != nil {
		return err
	}
	if _, err := b.js.Publish(ctx, subj, payload); err != nil {
		return fmt.Errorf("natsbus: publish advert for %s: %w", cluster, err)
	}
	return nil
}

// RequestAdvert asks cluster's agent for a full advertisement now, on core
// NATS: fire and forget. A hub that starts when the stream's last advert
// of a cluster is a delta has no base to apply it to; without asking, it
// waits for the agent's next periodic full advertisement (10 s by
// default). An agent too old to listen, or without the permission to,
// simply does not answer.
func (b *Bus) RequestAdvert(cluster string) error {
	subj, err := AdvertRequestSubject(cluster)
	if err != nil {
		return err
	}
	if err := b.nc.Publish(subj, nil); err != nil {
		return fmt.Errorf("natsbus: request an advert from %s: %w", cluster, err)
	}
	return nil
}

// SubscribeAdvertRequests calls fn whenever a hub asks cluster's agent for
// a full advertisement, until the returned func is called.
func (b *Bus) SubscribeAdvertRequests(cluster string, fn func()) (func(), error) {
	subj, err := AdvertRequestSubject(cluster)
	if err != nil {
		return nil, err
	}
	sub, err := b.nc.Subscribe(subj, func(*nats.Msg) { fn() })
	if err != nil {
		return nil, fmt.Errorf("natsbus: subscribe %s: %w", subj, err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// PublishHeartbeat sends a heartbeat on core NATS: fire and forget, nothing
// is stored, and nobody listening is not an error.
func (b *Bus) PublishHeartbeat(ctx context.Context, cluster string, payload []byte) error {
	subj, err := HeartbeatSubject(cluster)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := b.nc.Publish(subj, payload); err != nil {
		return fmt.Errorf("natsbus: publish heartbeat for %s: %w", cluster, err)
	}
	return nil
}
