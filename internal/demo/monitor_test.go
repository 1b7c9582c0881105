package demo

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The demo reads the preemption counter from the hub's /metrics, which
// needs authentication: the monitor presents the admin token.
func TestMonitorReadsMetricsWithTheToken(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" || r.Header.Get("Authorization") != "Bearer mrd_demo" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte("# TYPE meridian_preemptions_total counter\nmeridian_preemptions_total{reason=\"priority\"} 1\nmeridian_preemptions_total{reason=\"reclaim\"} 2\n"))
	}))
	defer srv.Close()
	m := &monitor{httpAddr: strings.TrimPrefix(srv.URL, "http://"), token: "mrd_demo"}
	if got := m.preemptions(context.Background()); got != 3 {
		t.Fatalf("preemptions = %d with the token, want 3 (the sum over the rules)", got)
	}
	m.token = ""
	if got := m.preemptions(context.Background()); got != -1 {
		t.Fatalf("preemptions = %d without the token, want -1 (unknown)", got)
	}
}
