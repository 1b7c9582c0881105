package leader

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	embedetcd "github.com/meridian-gpu/meridian/internal/embedded/etcd"
)

var srv *embedetcd.Server

func TestMain(m *testing.M) {
	var stop func()
	var err error
	if srv, stop, err = embedetcd.StartTemp("leader-etcd-"); err != nil {
		fmt.Fprintln(os.Stderr, "start embedded etcd:", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

func newClient(t *testing.T) *clientv3.Client {
	t.Helper()
	c, err := srv.Client(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var prefixSeq atomic.Int64

// prefixFor gives each test (and each -count repetition) its own election.
func prefixFor(t *testing.T) string {
	return fmt.Sprintf("/test/%s/%d/leader", strings.ReplaceAll(t.Name(), "/", "_"), prefixSeq.Add(1))
}

func TestNewValidates(t *testing.T) {
	c := newClient(t)
	tests := map[string]struct {
		client *clientv3.Client
		prefix string
		id     string
		ttl    time.Duration
		want   string
	}{
		"nil client":      {nil, "/p", "a", time.Second, "client"},
		"empty prefix":    {c, "", "a", time.Second, "prefix"},
		"relative prefix": {c, "p", "a", time.Second, "prefix"},
		"root prefix":     {c, "/", "a", time.Second, "prefix"},
		"empty id":        {c, "/p", " ", time.Second, "id"},
		"zero ttl":        {c, "/p", "a", 0, "ttl"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := New(tc.client, tc.prefix, tc.id, tc.ttl)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New error = %v, want one naming %q", err, tc.want)
			}
		})
	}
}

func TestFenceValidate(t *testing.T) {
	tests := map[string]struct {
		f    Fence
		want string
	}{
		"zero":         {Fence{}, "Key"},
		"no revision":  {Fence{Key: "/k"}, "Rev"},
		"negative rev": {Fence{Key: "/k", Rev: -3}, "Rev"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.f.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want error naming %s", err, tc.want)
			}
		})
	}
	if err := (Fence{Key: "/k", Rev: 1}).Validate(); err != nil {
		t.Fatalf("valid fence rejected: %v", err)
	}
}

// campaignAsync runs Campaign in the background and reports its result.
func campaignAsync(ctx context.Context, e *Elector) <-chan campaignResult {
	ch := make(chan campaignResult, 1)
	go func() {
		f, err := e.Campaign(ctx)
		ch <- campaignResult{f, err}
	}()
	return ch
}

type campaignResult struct {
	fence Fence
	err   error
}

func TestFailoverWhenLeaderSessionExpires(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	prefix := prefixFor(t)
	c1, err := srv.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2 := newClient(t)

	e1, err := New(c1, prefix, "hub-a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	e2, err := New(c2, prefix, "hub-b", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	f1, err := e1.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := e2.Leader(ctx); err != nil || got != "hub-a" {
		t.Fatalf("Leader() = %q, %v; want hub-a", got, err)
	}
	second := campaignAsync(ctx, e2)
	select {
	case r := <-second:
		t.Fatalf("second elector led while the first held the term: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := FencedTxn(ctx, c2, f1, clientv3.OpPut(prefix+"-data", "from-a")); err != nil {
		t.Fatalf("commit fenced by the live term refused: %v", err)
	}

	// The first leader's process "dies": its client goes away and its lease
	// is no longer refreshed.
	lost := time.Now()
	_ = c1.Close()
	var f2 Fence
	select {
	case r := <-second:
		if r.err != nil {
			t.Fatal(r.err)
		}
		f2 = r.fence
	case <-time.After(5 * time.Second):
		t.Fatal("second elector did not lead within 5s of the first one's death")
	}
	t.Logf("failover took %s with a 1s TTL", time.Since(lost))
	select {
	case <-e1.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("first elector's Done not closed after its session died")
	}
	if f2 == f1 || f2.Rev <= f1.Rev {
		t.Fatalf("new fence %v does not supersede old fence %v", f2, f1)
	}
	if got, err := e2.Leader(ctx); err != nil || got != "hub-b" {
		t.Fatalf("Leader() = %q, %v; want hub-b", got, err)
	}

	_, err = FencedTxn(ctx, c2, f1, clientv3.OpPut(prefix+"-data", "stale write"))
	if !IsNotLeader(err) {
		t.Fatalf("commit with the deposed fence: err = %v, want ErrNotLeader", err)
	}
	if _, err := FencedTxn(ctx, c2, f2, clientv3.OpPut(prefix+"-data", "from-b")); err != nil {
		t.Fatalf("commit with the new fence: %v", err)
	}
	resp, err := c2.Get(ctx, prefix+"-data")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(resp.Kvs[0].Value); got != "from-b" {
		t.Fatalf("data = %q, want from-b (the stale write must not land)", got)
	}
	if f, ok := e2.Fence(); !ok || f != f2 {
		t.Fatalf("e2.Fence() = %v, %v; want %v, true", f, ok, f2)
	}
}

func TestResignHandsOverAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	prefix := prefixFor(t)
	c1, c2 := newClient(t), newClient(t)
	// A long TTL proves the hand-over comes from Resign, not expiry.
	e1, _ := New(c1, prefix, "hub-a", 30*time.Second)
	e2, _ := New(c2, prefix, "hub-b", 30*time.Second)
	select {
	case <-e1.Done():
	default:
		t.Fatal("Done() before any campaign must be closed")
	}
	f1, err := e1.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	again, err := e1.Campaign(ctx)
	if err != nil || again != f1 {
		t.Fatalf("Campaign while leading = %v, %v; want the same fence %v", again, err, f1)
	}
	done1 := e1.Done()
	second := campaignAsync(ctx, e2)
	t0 := time.Now()
	if err := e1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e1.Resign(ctx); err != nil {
		t.Fatalf("second Resign: %v", err)
	}
	select {
	case <-done1:
	default:
		t.Fatal("Done not closed after Resign")
	}
	if _, ok := e1.Fence(); ok {
		t.Fatal("Fence() still reports leadership after Resign")
	}
	var f2 Fence
	select {
	case r := <-second:
		if r.err != nil {
			t.Fatal(r.err)
		}
		f2 = r.fence
	case <-time.After(3 * time.Second):
		t.Fatal("successor did not lead within 3s of Resign (30s TTL)")
	}
	t.Logf("hand-over after Resign took %s", time.Since(t0))
	if _, err := FencedTxn(ctx, c1, f1, clientv3.OpPut(prefix+"-x", "1")); !IsNotLeader(err) {
		t.Fatalf("old fence after Resign: err = %v, want ErrNotLeader", err)
	}
	if _, err := FencedTxn(ctx, c1, f2, clientv3.OpPut(prefix+"-x", "2")); err != nil {
		t.Fatal(err)
	}
	_ = e2.Resign(ctx)
	if _, err := e2.Leader(ctx); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader() with nobody campaigning: err = %v, want ErrNoLeader", err)
	}
}

func TestDoneClosesWhenElectionKeyDeleted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := newClient(t)
	e, _ := New(c, prefixFor(t), "hub-a", 30*time.Second)
	f, err := e.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Resign(ctx)
	if _, err := c.Delete(ctx, f.Key); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("Done not closed after the election key was deleted")
	}
	// A later Campaign starts a fresh term.
	f2, err := e.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f2.Rev <= f.Rev {
		t.Fatalf("new term fence %v not newer than %v", f2, f)
	}
}

func TestCampaignGivesUpWithContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prefix := prefixFor(t)
	c1, c2 := newClient(t), newClient(t)
	e1, _ := New(c1, prefix, "hub-a", 30*time.Second)
	e2, _ := New(c2, prefix, "hub-b", 30*time.Second)
	if _, err := e1.Campaign(ctx); err != nil {
		t.Fatal(err)
	}
	defer e1.Resign(ctx)
	short, scancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer scancel()
	if _, err := e2.Campaign(short); err == nil {
		t.Fatal("Campaign returned leadership while another replica leads")
	}
	resp, err := c1.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 1 {
		t.Fatalf("%d election keys after a cancelled campaign, want 1 (no leftovers)", resp.Count)
	}
}

// A replica restarted under the same id (the hub keeps it in its data
// directory) takes the term at once instead of waiting out the lease of
// its own dead process; a replica with another id still waits.
func TestRestartUnderTheSameIDReclaimsItsOldLease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prefix := prefixFor(t)
	c1, err := srv.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old, err := New(c1, prefix, "hub-a", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Campaign(ctx); err != nil {
		t.Fatal(err)
	}
	oldLease := old.session.Lease()
	_ = c1.Close() // the process dies without resigning: its lease lives on

	other, err := New(newClient(t), prefix, "hub-b", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, time.Second)
	_, err = other.Campaign(wctx)
	wcancel()
	if err == nil {
		t.Fatal("another replica led while the dead one's lease was live")
	}

	restarted, err := New(newClient(t), prefix, "hub-a", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	f, err := restarted.Campaign(rctx)
	if err != nil {
		t.Fatalf("the restarted replica did not lead while its old lease (20 s) was live: %v", err)
	}
	if restarted.Reclaimed() != 1 {
		t.Fatalf("Reclaimed() = %d, want 1", restarted.Reclaimed())
	}
	ttl, err := newClient(t).TimeToLive(ctx, oldLease)
	if err != nil || ttl.TTL != -1 {
		t.Fatalf("old lease TTL = %+v, %v; want it revoked", ttl, err)
	}
	if _, err := FencedTxn(ctx, restarted.client, f, clientv3.OpPut(prefix+"-data", "after-restart")); err != nil {
		t.Fatalf("commit in the reclaimed term: %v", err)
	}
}
