package server

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// TestHubRetentionDeletesOldestFinishedOverTheCap runs a whole hub with a
// per-queue cap of one finished workload: of two cancelled workloads the
// older is deleted once the idempotency window (a day by default, an hour
// when set) has passed (REST GET says 404), the newer and a queued one
// stay, and /metrics counts the delete.
func TestHubRetentionDeletesOldestFinishedOverTheCap(t *testing.T) {
	for _, c := range []struct {
		name   string
		window time.Duration
		after  time.Duration
	}{
		{"default window", 0, 25 * time.Hour},
		{"one-hour window", time.Hour, 61 * time.Minute},
	} {
		t.Run(c.name, func(t *testing.T) { testRetentionOverTheCap(t, c.window, c.after) })
	}
}

func testRetentionOverTheCap(t *testing.T, window, after time.Duration) {
	var skew atomic.Int64 // how far the hub's clock runs ahead
	clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	s, err := New(Config{DataDir: t.TempDir(), HubID: "hub-r", UnsafeNoFsync: true, LeaderTTL: time.Second, Logger: testLogger(), Clock: clock,
		RetentionPerQueue: 1, RetentionTTL: 7 * 24 * time.Hour, RetentionInterval: 20 * time.Millisecond, IdempotencyWindow: window})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("Run did not return within 15s of cancel")
		}
		_ = s.Close()
	})
	waitReady(t, s)
	base := "http://" + s.Addrs().HTTP
	for _, q := range []string{"acme", "acme/vision"} {
		if code, body := post(t, base+"/v1/queues", `{"path":"`+q+`","weight":1,"quotas":[{"acceleratorClass":"nvidia-h100-80gb","nominalMilliGpus":8000}]}`); code != 200 {
			t.Fatalf("create queue %s: %d %s", q, code, body)
		}
	}
	submit := func() string {
		t.Helper()
		// No cluster serves this class, so the workload stays queued.
		code, body := post(t, base+"/v1/workloads", `{"queue":"acme/vision","podSets":[{"name":"w","replicas":1,"resources":{"gpuMilli":1000,"acceleratorClass":"nvidia-h100-80gb"}}]}`)
		if code != 200 {
			t.Fatalf("submit: %d %s", code, body)
		}
		var sub meridianv1.SubmitWorkloadResponse
		if err := protojson.Unmarshal([]byte(body), &sub); err != nil {
			t.Fatal(err)
		}
		return sub.GetWorkload().GetId()
	}
	older, newer, queued := submit(), submit(), submit()
	for _, id := range []string{older, newer} {
		if code, body := post(t, base+"/v1/workloads/"+id+":cancel", `{"reason":"done"}`); code != 200 || !strings.Contains(body, "CANCELLED") {
			t.Fatalf("cancel %s: %d %s", id, code, body)
		}
		// Distinct end times, so "newest" is not decided by id alone.
		time.Sleep(5 * time.Millisecond)
	}
	// Within the window of their end both stay: a client may still replay
	// their idempotency keys.
	time.Sleep(200 * time.Millisecond)
	if code, body := get(t, base+"/v1/workloads/"+older); code != 200 {
		t.Fatalf("the older workload went within the idempotency window of its end: %d %s", code, body)
	}
	skew.Store(int64(after))
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, _ := get(t, base+"/v1/workloads/"+older)
		if code == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the older finished workload is still there (GET %d) 20s after it went over the cap", code)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, id := range []string{newer, queued} {
		if code, body := get(t, base+"/v1/workloads/"+id); code != 200 {
			t.Fatalf("workload %s: %d %s; want it kept", id, code, body)
		}
	}
	code, metrics := get(t, base+"/metrics")
	if code != 200 || !strings.Contains(metrics, `meridian_retention_deleted_workloads_total{reason="queue_cap"} 1`) {
		t.Fatalf("metrics %d lack the retention counter:\n%.3000s", code, metrics)
	}
	// Once the loop had read the store, passes chose from its index of
	// finished workloads instead of listing the store.
	if m := regexp.MustCompile(`meridian_retention_choices_total\{source="index"\} (\d+)`).FindStringSubmatch(metrics); m == nil || m[1] == "0" {
		t.Fatalf("no retention pass chose from the loop's index:\n%.3000s", metrics)
	}
	// The three submits were stored, by the loop's intake or a group
	// commit, and the API counts each by its writer.
	stored := 0
	for _, m := range regexp.MustCompile(`meridian_api_submitted_workloads_total\{writer="[a-z_]+"\} (\d+)`).FindAllStringSubmatch(metrics, -1) {
		n, _ := strconv.Atoi(m[1])
		stored += n
	}
	if stored != 3 {
		t.Fatalf("metrics count %d submitted workloads by writer; want 3:\n%.3000s", stored, metrics)
	}
}
