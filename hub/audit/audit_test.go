package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	embedetcd "github.com/meridian-gpu/meridian/internal/embedded/etcd"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

func startEtcd(t *testing.T) *clientv3.Client {
	t.Helper()
	s, stop, err := embedetcd.StartTemp("audit-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	cli, err := s.Client(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func event(user, verb, target string, res meridianv1.AuditResult, at time.Time) *meridianv1.AuditEvent {
	return &meridianv1.AuditEvent{Principal: &meridianv1.Principal{User: user, Method: "oidc"}, Rpc: "/meridian.v1.X/" + verb,
		Verb: verb, Target: target, Result: res, Time: timestamppb.New(at)}
}

// Events reach both sinks; List filters and pages them newest first.
func TestRecordAndList(t *testing.T) {
	cli := startEtcd(t)
	var lines bytes.Buffer
	r := New(Config{JSONLines: &lines, Etcd: cli})
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	allowed, denied := meridianv1.AuditResult_AUDIT_RESULT_ALLOWED, meridianv1.AuditResult_AUDIT_RESULT_DENIED
	evs := []*meridianv1.AuditEvent{
		event("alice", "submit", "acme/research", allowed, t0),
		event("bob", "update", "acme/research", denied, t0.Add(time.Second)),
		event("alice", "cancel", "wl-1", allowed, t0.Add(2*time.Second)),
		event("mallory", "manage", "other/team", denied, t0.Add(3*time.Second)),
		event("alice", "submit", "acme/product", allowed, t0.Add(4*time.Second)),
	}
	for _, e := range evs {
		r.Record(e)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(lines.String(), "\n"); n != len(evs) {
		t.Fatalf("JSON-lines log has %d lines, want %d:\n%s", n, len(evs), lines.String())
	}
	var first map[string]any
	if err := json.Unmarshal([]byte(strings.SplitN(lines.String(), "\n", 2)[0]), &first); err != nil || first["verb"] != "submit" || first["id"] == "" {
		t.Fatalf("first line %v (%v)", first, err)
	}
	ctx := context.Background()
	ids := func(f Filter, limit int) []string {
		t.Helper()
		var out []string
		token := ""
		for page := 0; page < 10; page++ {
			got, next, err := List(ctx, cli, f, limit, token)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range got {
				out = append(out, e.GetPrincipal().GetUser()+":"+e.GetVerb())
			}
			if next == "" {
				return out
			}
			token = next
		}
		t.Fatal("more than 10 pages")
		return nil
	}
	cases := map[string]struct {
		f    Filter
		want string
	}{
		"all, newest first": {Filter{}, "alice:submit,mallory:manage,alice:cancel,bob:update,alice:submit"},
		"by user":           {Filter{User: "alice"}, "alice:submit,alice:cancel,alice:submit"},
		"by verb":           {Filter{Verb: "submit"}, "alice:submit,alice:submit"},
		"by target prefix":  {Filter{Target: "acme/"}, "alice:submit,bob:update,alice:submit"},
		"denied only":       {Filter{Result: denied}, "mallory:manage,bob:update"},
		"time window":       {Filter{Since: t0.Add(time.Second), Until: t0.Add(3 * time.Second)}, "alice:cancel,bob:update"},
	}
	for name, tc := range cases {
		for _, limit := range []int{1, 2, 100} {
			t.Run(fmt.Sprintf("%s/limit=%d", name, limit), func(t *testing.T) {
				if got := strings.Join(ids(tc.f, limit), ","); got != tc.want {
					t.Fatalf("got  %s\nwant %s", got, tc.want)
				}
			})
		}
	}
	if _, _, err := List(ctx, cli, Filter{}, 10, "../../etc"); !errors.Is(err, ErrBadPageToken) {
		t.Fatalf("a forged page token: %v, want ErrBadPageToken", err)
	}
}

// The etcd log keeps at most MaxEvents, and nothing older than MaxAge.
func TestRetention(t *testing.T) {
	cli := startEtcd(t)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	r := New(Config{Etcd: cli, MaxEvents: 3, MaxAge: time.Hour, Clock: func() time.Time { return now }})
	for i := 0; i < 6; i++ {
		r.Record(event(fmt.Sprintf("u%d", i), "submit", "q", meridianv1.AuditResult_AUDIT_RESULT_ALLOWED, now.Add(-time.Duration(6-i)*time.Minute)))
	}
	r.Record(event("ancient", "submit", "q", meridianv1.AuditResult_AUDIT_RESULT_ALLOWED, now.Add(-2*time.Hour)))
	r.Close()
	ctx := context.Background()
	if err := r.prune(ctx, now); err != nil {
		t.Fatal(err)
	}
	got, _, err := List(ctx, cli, Filter{}, 100, "")
	if err != nil {
		t.Fatal(err)
	}
	var users []string
	for _, e := range got {
		users = append(users, e.GetPrincipal().GetUser())
	}
	if strings.Join(users, ",") != "u5,u4,u3" {
		t.Fatalf("kept %v, want the newest three u5,u4,u3", users)
	}
}

func TestNewIDSortsByTime(t *testing.T) {
	a := NewID(time.Unix(1, 0))
	b := NewID(time.Unix(1, 1))
	c := NewID(time.Unix(100, 0))
	if !(a < b && b < c) || !validID(a) || validID("x"+a[1:]) {
		t.Fatalf("ids %s %s %s do not sort by time or do not validate", a, b, c)
	}
}

// Under load the etcd log takes one transaction per batch, not one per
// handful of events: a burst recorded within the linger is one write.
// Close does not wait out the linger.
func TestBatchesLingerAndCloseFlushes(t *testing.T) {
	cli := startEtcd(t)
	ctx := context.Background()
	rev := func() int64 {
		resp, err := cli.Get(ctx, "/none")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	r := New(Config{Etcd: cli, Linger: time.Hour, Clock: func() time.Time { return now }})
	before := rev()
	const n = 500
	for i := 0; i < n; i++ {
		r.Record(event(fmt.Sprintf("u%d", i), "submit", "q", meridianv1.AuditResult_AUDIT_RESULT_ALLOWED, now))
	}
	start := time.Now()
	r.Close()
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("Close took %v with an hour's linger: it must flush at once", took)
	}
	got, _, err := List(ctx, cli, Filter{}, 1000, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("stored %d events, want %d", len(got), n)
	}
	// The burst fits one batch; pruning (once, right after the first
	// write) deletes nothing and so takes no revision.
	if txns := rev() - before; txns != 1 {
		t.Fatalf("%d events took %d transactions, want 1", n, txns)
	}
	// And one key: the batch is one page.
	if resp, err := cli.Get(ctx, PagePrefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 1 {
		t.Fatalf("%d events stored under %d keys (%v), want 1 page", n, resp.Count, err)
	}
}
