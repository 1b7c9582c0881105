package audit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// listAll pages through List with limit and returns the ids in the order
// returned, failing on a loop that does not end.
func listAll(t *testing.T, cli *clientv3.Client, f Filter, limit int) []string {
	t.Helper()
	var out []string
	token := ""
	for range 100_000 {
		got, next, err := List(context.Background(), cli, f, limit, token)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range got {
			out = append(out, e.GetId())
		}
		if next == "" {
			return out
		}
		if next == token {
			t.Fatalf("List returned its own page token %s again: no progress", next)
		}
		token = next
	}
	t.Fatal("List did not finish")
	return nil
}

// Two recorders (two hubs) write pages whose times overlap, and events
// whose times run backwards across batches; List still returns every
// event exactly once, newest first, whatever the page size.
func TestListMergesOverlappingPages(t *testing.T) {
	cli := startEtcd(t)
	rng := rand.New(rand.NewPCG(7, 11))
	t0 := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	var want []string
	for hub := range 2 {
		r := &Recorder{cfg: Config{Etcd: cli}}
		for b := range 20 {
			var batch []*meridianv1.AuditEvent
			for range 1 + rng.IntN(40) {
				// Up to 700ms either side of the batch's time: batches
				// overlap each other and the other hub's.
				at := t0.Add(time.Duration(b)*300*time.Millisecond + time.Duration(rng.IntN(1400)-700)*time.Millisecond)
				e := event(fmt.Sprintf("h%d", hub), "submit", "q", meridianv1.AuditResult_AUDIT_RESULT_ALLOWED, at)
				e.Id = NewID(at)
				batch = append(batch, e)
				want = append(want, e.Id)
			}
			if err := r.put(context.Background(), batch); err != nil {
				t.Fatal(err)
			}
		}
	}
	slices.Sort(want)
	slices.Reverse(want)
	for _, limit := range []int{1, 7, 100, 1000} {
		if got := listAll(t, cli, Filter{}, limit); !slices.Equal(got, want) {
			t.Fatalf("limit %d: got %d events, want %d, newest first (first difference at %d)", limit, len(got), len(want), firstDiff(got, want))
		}
	}
	// A time window cut inside pages.
	since, until := t0.Add(2*time.Second), t0.Add(4*time.Second)
	var window []string
	for _, id := range want {
		if ns := idNanos(id); ns >= since.UnixNano() && ns < until.UnixNano() {
			window = append(window, id)
		}
	}
	if got := listAll(t, cli, Filter{Since: since, Until: until}, 9); !slices.Equal(got, window) || len(window) == 0 {
		t.Fatalf("window: got %d events, want %d (first difference at %d)", len(got), len(window), firstDiff(got, window))
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// A batch is cut into pages of at most pageSpan and pageBytes, each
// sorted, and a page decodes to what was written.
func TestPaginateBounds(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	var batch []*meridianv1.AuditEvent
	for i := range 3000 {
		at := t0.Add(time.Duration(2999-i) * time.Millisecond) // backwards
		e := event("u", "submit", strings.Repeat("q", 200), meridianv1.AuditResult_AUDIT_RESULT_ALLOWED, at)
		e.Id = NewID(at)
		batch = append(batch, e)
	}
	pages, err := paginate(slices.Clone(batch))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) < 3 {
		t.Fatalf("3 s of events in %d pages, want at least 3", len(pages))
	}
	total := 0
	for _, p := range pages {
		evs := p.events
		if span := idNanos(evs[len(evs)-1].Id) - idNanos(evs[0].Id); span > int64(pageSpan) {
			t.Fatalf("page spans %v", time.Duration(span))
		}
		if len(p.value) > pageBytes {
			t.Fatalf("page of %d bytes", len(p.value))
		}
		newest, n, err := pageKey(p.key())
		if err != nil || newest != evs[len(evs)-1].Id || n != len(evs) {
			t.Fatalf("key %s: %s, %d, %v", p.key(), newest, n, err)
		}
		got, err := decodePage(p.value)
		if err != nil || len(got) != len(evs) {
			t.Fatalf("decoded %d of %d events: %v", len(got), len(evs), err)
		}
		for i := range got {
			if !proto.Equal(got[i], evs[i]) || (i > 0 && got[i].Id <= got[i-1].Id) {
				t.Fatalf("event %d decoded as %v, want %v, in id order", i, got[i], evs[i])
			}
		}
		total += len(got)
	}
	if total != len(batch) {
		t.Fatalf("pages hold %d events, want %d", total, len(batch))
	}
	big := make([]*meridianv1.AuditEvent, 0, 1024)
	for range 1024 {
		e := event("u", "submit", strings.Repeat("t", 1000), meridianv1.AuditResult_AUDIT_RESULT_ALLOWED, t0)
		e.Id = NewID(t0)
		big = append(big, e)
	}
	if pages, err = paginate(big); err != nil || len(pages) < 4 {
		t.Fatalf("1 MB of events in %d pages (%v), want at least 4 of 256 KiB", len(pages), err)
	}
}

// List gives up after maxScan events read in one call and says where to go
// on; paging through finds every match, in order.
func TestListStopsAfterMaxScan(t *testing.T) {
	cli := startEtcd(t)
	r := &Recorder{cfg: Config{Etcd: cli}}
	t0 := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	var want []string
	for b := range 26 {
		batch := make([]*meridianv1.AuditEvent, 0, 1000)
		for i := range 1000 {
			at := t0.Add(time.Duration(b*1000+i) * time.Millisecond)
			user := "other"
			if i%250 == 0 {
				user = "needle"
			}
			e := event(user, "submit", "q", meridianv1.AuditResult_AUDIT_RESULT_ALLOWED, at)
			e.Id = NewID(at)
			if user == "needle" {
				want = append(want, e.Id)
			}
			batch = append(batch, e)
		}
		if err := r.put(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
	}
	slices.Reverse(want)
	got, next, err := List(context.Background(), cli, Filter{User: "needle"}, 1000, "")
	if err != nil || next == "" || len(got) >= len(want) {
		t.Fatalf("first call: %d events, next %q, %v; want fewer than %d and a token", len(got), next, err, len(want))
	}
	if all := listAll(t, cli, Filter{User: "needle"}, 1000); !slices.Equal(all, want) {
		t.Fatalf("paged: %d events, want %d in order (first difference at %d)", len(all), len(want), firstDiff(all, want))
	}
}

// Events an older hub stored one key each move into pages when a recorder
// starts, and List shows them with the new ones.
func TestMigratesLegacyKeys(t *testing.T) {
	cli := startEtcd(t)
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	var want []string
	for i := range 1300 {
		e := event("old", "submit", "q", meridianv1.AuditResult_AUDIT_RESULT_ALLOWED, t0.Add(time.Duration(i)*10*time.Millisecond))
		e.Id = NewID(e.Time.AsTime())
		b, err := proto.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, legacyPrefix+e.Id, string(b)); err != nil {
			t.Fatal(err)
		}
		want = append(want, e.Id)
	}
	if _, err := cli.Put(ctx, legacyPrefix+"garbage", "\xff\xff"); err != nil {
		t.Fatal(err)
	}
	r := New(Config{Etcd: cli})
	fresh := event("new", "submit", "q", meridianv1.AuditResult_AUDIT_RESULT_ALLOWED, t0.Add(time.Hour))
	r.Record(fresh)
	r.Close()
	want = append(want, fresh.Id)
	slices.Reverse(want)
	if got := listAll(t, cli, Filter{}, 500); !slices.Equal(got, want) {
		t.Fatalf("after migration: %d events, want %d in order (first difference at %d)", len(got), len(want), firstDiff(got, want))
	}
	resp, err := cli.Get(ctx, legacyPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("%d legacy keys left (%v), want 0", resp.Count, err)
	}
}

// Damaged pages and keys never panic the decoders.
func FuzzDecodePage(f *testing.F) {
	t0 := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	e := event("u", "submit", "q", meridianv1.AuditResult_AUDIT_RESULT_ALLOWED, t0)
	e.Id = NewID(t0)
	pages, err := paginate([]*meridianv1.AuditEvent{e})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(pages[0].value, pages[0].key())
	f.Add([]byte{0x0a, 0xff}, PagePrefix+"x/1")
	f.Fuzz(func(t *testing.T, value []byte, key string) {
		evs, err := decodePage(value)
		if err == nil {
			for _, e := range evs {
				if e == nil {
					t.Fatal("nil event without an error")
				}
			}
		}
		if newest, n, err := pageKey(key); err == nil && (!validID(newest) || n <= 0) {
			t.Fatalf("pageKey(%q) = %q, %d without an error", key, newest, n)
		}
	})
}
