package localrun

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// WaitReady returns once the URL answers 200, keeps asking while it does
// not, and gives up with an error naming the URL after the limit.
func TestWaitReady(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := WaitReady(ctx, srv.URL+"/readyz", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d requests, want 3 (two 503s, then 200)", n)
	}

	never := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer never.Close()
	err := WaitReady(ctx, never.URL+"/readyz", 200*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), never.URL+"/readyz not ready within 200ms") {
		t.Fatalf("err = %v, want one naming the URL and the limit", err)
	}
}
