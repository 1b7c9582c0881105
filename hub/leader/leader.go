package leader

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// ErrNotLeader means a fenced commit was refused because the fence no longer
// holds: the election key is gone or belongs to a newer term.
var ErrNotLeader = errors.New("not the leader: fence check failed")

// ErrNoLeader means nobody currently leads the election.
var ErrNoLeader = errors.New("no leader elected")

// IsNotLeader reports whether err is or wraps ErrNotLeader.
func IsNotLeader(err error) bool { return errors.Is(err, ErrNotLeader) }

// Fence identifies one leadership term: the leader's election key and the
// revision at which it was created. A new term always has a new key or a
// larger revision.
type Fence struct {
	Key string
	Rev int64
}

// Cmp is the compare that guards a leader's commit: it holds only while Key
// exists with create revision Rev.
func (f Fence) Cmp() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(f.Key), "=", f.Rev)
}

// Validate reports a clear error for a zero or malformed fence.
func (f Fence) Validate() error {
	if f.Key == "" {
		return errors.New("leader: Fence.Key is empty")
	}
	if f.Rev <= 0 {
		return fmt.Errorf("leader: Fence.Rev %d must be positive", f.Rev)
	}
	return nil
}

func (f Fence) String() string { return fmt.Sprintf("%s@%d", f.Key, f.Rev) }

// FencedTxn runs ops in one transaction guarded by fence. It returns
// ErrNotLeader (wrapped, naming the fence) when the fence no longer holds, in
// which case nothing was written.
func FencedTxn(ctx context.Context, kv clientv3.KV, fence Fence, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	if err := fence.Validate(); err != nil {
		return nil, err
	}
	resp, err := kv.Txn(ctx).If(fence.Cmp()).Then(ops...).Commit()
	if err != nil {
		return nil, fmt.Errorf("leader: fenced txn: %w", err)
	}
	if !resp.Succeeded {
		return resp, fmt.Errorf("fence %s: %w", fence, ErrNotLeader)
	}
	return resp, nil
}

// Elector campaigns for leadership under one prefix on behalf of one replica.
// It is safe for concurrent use. One Elector holds at most one term at a
// time; after a term ends, Campaign may be called again.
type Elector struct {
	client *clientv3.Client
	prefix string
	id     string
	ttl    int

	campaignMu sync.Mutex // serialises Campaign calls

	mu        sync.Mutex // guards the fields below
	session   *concurrency.Session
	election  *concurrency.Election
	fence     Fence
	reclaimed int
	done      chan struct{}
	stop      context.CancelFunc
}

// New returns an Elector for replica id. prefix is the election's key prefix
// (e.g. "/meridian/leader"); ttl is the lease time to live, rounded up to
// whole seconds (etcd leases count seconds), at least one second. A leader
// that stops refreshing its lease loses the term after about ttl.
func New(client *clientv3.Client, prefix, id string, ttl time.Duration) (*Elector, error) {
	if client == nil {
		return nil, errors.New("leader: client is nil")
	}
	if !strings.HasPrefix(prefix, "/") || strings.TrimRight(prefix, "/") == "" {
		return nil, fmt.Errorf("leader: prefix %q must start with '/' and name a key", prefix)
	}
	if strings.TrimSpace(id) == "" {
		return nil, errors.New("leader: id is empty")
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("leader: ttl %s must be positive", ttl)
	}
	secs := int(math.Ceil(ttl.Seconds()))
	closed := make(chan struct{})
	close(closed)
	return &Elector{client: client, prefix: strings.TrimRight(prefix, "/"), id: id, ttl: secs, done: closed}, nil
}

// ID is the replica id this Elector campaigns as.
func (e *Elector) ID() string { return e.id }

// Campaign blocks until this replica leads or ctx ends, and returns the
// term's Fence. If the Elector already leads, it returns the current Fence.
func (e *Elector) Campaign(ctx context.Context) (Fence, error) {
	e.campaignMu.Lock()
	defer e.campaignMu.Unlock()
	e.mu.Lock()
	if e.election != nil {
		select {
		case <-e.done:
			e.cleanupLocked()
		default:
			f := e.fence
			e.mu.Unlock()
			return f, nil
		}
	}
	e.mu.Unlock()

	// The session lives on the client's context, not ctx: ctx only bounds
	// the wait to become leader.
	s, err := concurrency.NewSession(e.client, concurrency.WithTTL(e.ttl))
	if err != nil {
		return Fence{}, fmt.Errorf("leader: open session: %w", err)
	}
	if err := e.reclaim(ctx, s.Lease()); err != nil {
		_ = s.Close()
		return Fence{}, err
	}
	el := concurrency.NewElection(s, e.prefix)
	if err := el.Campaign(ctx, e.id); err != nil {
		_ = s.Close()
		return Fence{}, fmt.Errorf("leader: campaign as %q: %w", e.id, err)
	}
	f := Fence{Key: el.Key(), Rev: el.Rev()}
	// The lease may have expired while we waited; verify the key is ours.
	resp, err := e.client.Get(ctx, f.Key)
	if err != nil {
		_ = s.Close()
		return Fence{}, fmt.Errorf("leader: verify election key %s: %w", f.Key, err)
	}
	if len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != f.Rev {
		_ = s.Close()
		return Fence{}, fmt.Errorf("leader: election key %s vanished while campaigning: %w", f.Key, ErrNotLeader)
	}
	done := make(chan struct{})
	wctx, stop := context.WithCancel(e.client.Ctx())
	go watchTerm(wctx, e.client, s, f, done, resp.Header.Revision)
	e.mu.Lock()
	e.session, e.election, e.fence, e.done, e.stop = s, el, f, done, stop
	e.mu.Unlock()
	return f, nil
}

// reclaim revokes the leases of election keys that carry this replica's
// own id but not its current session: an earlier process of the same
// replica (a restart on the same data directory) that died without
// resigning. Its key would otherwise stand in line, or hold the term,
// until its lease ran out, and the replica would wait out its own old
// lease. Replica ids must be unique: a second live replica with the same
// id would have its term taken.
func (e *Elector) reclaim(ctx context.Context, current clientv3.LeaseID) error {
	resp, err := e.client.Get(ctx, e.prefix+"/", clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("leader: list election keys: %w", err)
	}
	for _, kv := range resp.Kvs {
		if string(kv.Value) != e.id || kv.Lease == 0 || clientv3.LeaseID(kv.Lease) == current {
			continue
		}
		if _, err := e.client.Revoke(ctx, clientv3.LeaseID(kv.Lease)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("leader: revoke the lease of an earlier %q (%s): %w", e.id, kv.Key, err)
		}
		e.mu.Lock()
		e.reclaimed++
		e.mu.Unlock()
	}
	return nil
}

// Reclaimed counts the election keys of earlier processes with this
// replica's id that Campaign removed (see reclaim).
func (e *Elector) Reclaimed() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.reclaimed
}

// watchTerm closes done when the session ends or the election key is
// deleted or replaced.
func watchTerm(ctx context.Context, c *clientv3.Client, s *concurrency.Session, f Fence, done chan struct{}, rev int64) {
	defer close(done)
	wch := c.Watch(clientv3.WithRequireLeader(ctx), f.Key, clientv3.WithRev(rev+1))
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.Done():
			return
		case wr, ok := <-wch:
			if !ok {
				return
			}
			if wr.Err() != nil {
				// Compaction or a lost etcd leader: re-read the key to decide.
				gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				resp, err := c.Get(gctx, f.Key)
				cancel()
				if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != f.Rev {
					return
				}
				wch = c.Watch(clientv3.WithRequireLeader(ctx), f.Key, clientv3.WithRev(resp.Header.Revision+1))
				continue
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete || ev.Kv.CreateRevision != f.Rev {
					return
				}
			}
		}
	}
}

// Fence returns the current term's fence and whether this replica believes it
// leads. Belief is not proof: only a fenced commit is.
func (e *Elector) Fence() (Fence, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.election == nil {
		return Fence{}, false
	}
	select {
	case <-e.done:
		return e.fence, false
	default:
		return e.fence, true
	}
}

// Done returns a channel that is closed when the current term ends (session
// expired, key deleted, or Resign). Before the first Campaign, and after a
// term ended, it returns a closed channel. Call it again after each Campaign.
func (e *Elector) Done() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.done
}

// Resign ends the current term, if any, deleting the election key and
// revoking the lease so a successor takes over at once. It is idempotent.
func (e *Elector) Resign(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.election == nil {
		return nil
	}
	var errs []error
	if err := e.election.Resign(ctx); err != nil {
		errs = append(errs, fmt.Errorf("leader: resign %s: %w", e.fence, err))
	}
	e.cleanupLocked()
	<-e.done
	return errors.Join(errs...)
}

// cleanupLocked revokes the session and stops the term watcher.
func (e *Elector) cleanupLocked() {
	if e.stop != nil {
		e.stop()
	}
	if e.session != nil {
		_ = e.session.Close()
	}
	e.session, e.election, e.stop = nil, nil, nil
}

// Leader returns the id of the current leader, or ErrNoLeader. It needs no
// session and may be called by any replica or tool.
func (e *Elector) Leader(ctx context.Context) (string, error) {
	resp, err := e.client.Get(ctx, e.prefix+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return "", fmt.Errorf("leader: read %s: %w", e.prefix, err)
	}
	if len(resp.Kvs) == 0 {
		return "", ErrNoLeader
	}
	return string(resp.Kvs[0].Value), nil
}
